#!/usr/bin/env python3
# Development stand-in for cordon-agent (only with CORDON_SBX_STANDIN=1; the suites use the real
# agent and template): GET /health -> 204, POST /init, POST /process.Process/Start (Connect
# server stream: start, data, end, end-of-stream), run as root. Port 49983.
import base64, http.server, json, os, socketserver, struct, subprocess, sys

ENV = {}

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/health":
            self.send_response(204); self.send_header("Content-Length", "0"); self.end_headers()
        else:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    def frame(self, flags, obj):
        d = json.dumps(obj).encode()
        b = struct.pack(">BI", flags, len(d)) + d
        self.wfile.write(b"%x\r\n" % len(b) + b + b"\r\n"); self.wfile.flush()
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/init":
            ENV.update(json.loads(body).get("envVars", {}))
            self.send_response(204); self.send_header("Content-Length", "0"); self.end_headers()
            return
        if self.path != "/process.Process/Start":
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
            return
        req = json.loads(body[5:])
        p = req["process"]
        env = dict(ENV); env.update(p.get("envs", {}))
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
        proc = subprocess.Popen([p["cmd"]] + p.get("args", []), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=p.get("cwd", "/"))
        self.frame(0, {"event": {"start": {"pid": proc.pid}}})
        out, err = proc.communicate()
        if out: self.frame(0, {"event": {"data": {"stdout": base64.b64encode(out).decode()}}})
        if err: self.frame(0, {"event": {"data": {"stderr": base64.b64encode(err).decode()}}})
        self.frame(0, {"event": {"end": {"exitCode": proc.returncode, "exited": proc.returncode >= 0}}})
        self.frame(2, {})
        self.wfile.write(b"0\r\n\r\n"); self.wfile.flush()

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("0.0.0.0", 49983), H).serve_forever()
