# A password in a server URL, in any form, is in no error message: the binding
# passes on the core's messages, which show URLs only redacted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use IO::Socket::INET;
use Test::More;
use Redmutex;

# A loopback port nothing listens on.
my $probe = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0) or die "$!";
my $port = $probe->sockport;
close $probe;

for my $url ("redis://127.0.0.1:$port?password=hunter22",
             "redis://bob:hunter22\@127.0.0.1:$port",
             "redis://127.0.0.1:$port?username=bob&password=hunter22&ssl_ca_certs=/x",
             "redis://127.0.0.1:$port?pasword=hunter22") {
    my $ok = eval {
        my $client = Redmutex::Client->new($url, connect_timeout => 0.5);
        $client->lock('pl:secret')->acquire(0);
        1;
    };
    my $error = "$@";
    ok !$ok, "$url fails";
    unlike $error, qr/hunter22/, "$url: the password is not in the message";
    like $error, qr/\*\*\*/, "$url: the URL is shown redacted";
}

done_testing;
