#!/bin/sh
# Writes the seed corpus of fuzz_http_request (run once from this folder; files committed).
# Byte 0: channel (0 TLS, 1 plain, 2 proxy) | 0x40 TLS for the injector; byte 1: token mode.
set -e
d=corpus
mkdir -p $d
printf '\100\001GET /repos/a?x=1\nHost:api.example.com\nAccept:*/*' > $d/tls_get
printf '\100\001POST /up\nHost:api.example.com\nContent-Length:5\nTransfer-Encoding:chunked' > $d/cl_te
printf '\100\002GET /\nHost:api.example.com\nAuthorization:Bearer cdn_ok_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' > $d/token_swap
printf '\100\001GET /p?k=cdn_ok_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nHost:api.example.com\nCookie:a=1' > $d/token_query
printf '\001\001GET http://api.example.com/\nHost:api.example.com\nConnection:close, X-Hop\nX-Hop:1' > $d/plain_absolute
printf '\002\000CONNECT api.example.com:443\nHost:api.example.com:443\nProxy-Authorization:Basic eDp5' > $d/proxy_connect
printf '\100\001GET /ws\nHost:api.example.com\nConnection:Upgrade\nUpgrade:websocket\nSec-WebSocket-Version:13' > $d/websocket
printf '\100\001GET /\nHost:api.example.com\nX-A:one\r\n two\nTransfer-Encoding: chunked' > $d/obs_fold
