# Sourced by the demo and the end-to-end scripts: a throwaway CA for the fake internet and one
# server certificate it signs (P-256, valid one day). Never used outside tests and demos.
# make_upstream_cert DIR CA_NAME NAME... : writes DIR/up-ca.pem, DIR/up.pem and DIR/up.key;
# the first NAME is the subject, all of them are subjectAltNames.
make_upstream_cert() {
  local dir=$1 ca_name=$2; shift 2
  local sans
  sans=$(printf 'DNS:%s,' "$@")
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=$ca_name" \
    -keyout "$dir/up-ca.key" -out "$dir/up-ca.pem" 2>/dev/null || return 1
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$dir/up.key" -out "$dir/up.csr" 2>/dev/null || return 1
  printf 'subjectAltName=%s\n' "${sans%,}" >"$dir/up.ext"
  openssl x509 -req -in "$dir/up.csr" -CA "$dir/up-ca.pem" -CAkey "$dir/up-ca.key" -CAcreateserial \
    -days 1 -extfile "$dir/up.ext" -out "$dir/up.pem" 2>/dev/null
}
