#!/bin/sh
# Makes the certificates the TLS tests and benchmarks use, in directory $1,
# with the openssl command (EC P-256 keys, valid for two days):
#   ca.pem ca.key              the test CA
#   other_ca.pem               a CA that signed none of the servers
#   server.pem server.key      localhost, 127.0.0.1 and ::1, signed by ca
#   expired.pem expired.key    the same names, signed by ca, already expired
#   wrong_name.pem wrong_name.key   elsewhere.example only, signed by ca
#   client.pem client.key      a client certificate signed by ca (mutual TLS)
#   rogue.pem rogue.key        a client certificate signed by other_ca
set -eu
cd "$1"

key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"; }

make_ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -subj "/CN=redmutex test $1" -days 2 -out "$1.pem"
}

# leaf NAME CA DAYS SUBJECT_ALT_NAMES
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -subj "/CN=redmutex test $1" -out "$1.csr"
  printf 'subjectAltName=%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days "$3" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

make_ca ca
make_ca other_ca
names='DNS:localhost,IP:127.0.0.1,IP:::1'
leaf server ca 2 "$names"
leaf expired ca -1 "$names"       # notAfter before notBefore: expired from the start
leaf wrong_name ca 2 'DNS:elsewhere.example'
leaf client ca 2 'DNS:redmutex-client'
leaf rogue other_ca 2 'DNS:redmutex-client'
