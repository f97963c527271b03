#!/bin/sh
# Writes the seed corpus of fuzz_dns (run once from this folder; the files are committed).
set -e
d=corpus
mkdir -p $d
# A query for api.example.com, RD set.
printf '\022\064\001\000\000\001\000\000\000\000\000\000\003api\007example\003com\000\000\001\000\001' > $d/a_query
# AAAA with an EDNS OPT record (udp 1232).
printf '\000\007\001\000\000\001\000\000\000\000\000\001\001a\007example\000\000\034\000\001\000\000\051\004\320\000\000\000\000\000\000' > $d/aaaa_edns
# Root NS query.
printf '\000\010\000\000\000\001\000\000\000\000\000\000\000\000\002\000\001' > $d/root_ns
# A (refused) pointer in the question.
printf '\000\011\000\000\000\001\000\000\000\000\000\000\001a\300\014\000\001\000\001' > $d/pointer_loop
# A long label (63 bytes) name.
printf '\000\012\000\000\000\001\000\000\000\000\000\000\077' > $d/long_label
printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\000\000\001\000\001' >> $d/long_label
# Resolver side: a response to the A query above, a CNAME then an A record (compressed names).
printf '\022\064\201\200\000\001\000\002\000\000\000\000\003api\007example\003com\000\000\001\000\001' > $d/a_response
printf '\300\014\000\005\000\001\000\000\000\074\000\006\003cdn\300\020' >> $d/a_response
printf '\300\055\000\001\000\001\000\000\000\074\000\004\300\000\002\001' >> $d/a_response
