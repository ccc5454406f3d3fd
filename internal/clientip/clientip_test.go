package clientip

import (
	"net/netip"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestResolve(t *testing.T) {
	t.Parallel()
	proxies := prefixes("10.0.0.0/8", "fd00::/8")
	tests := []struct {
		name    string
		peer    string
		xff     []string
		trusted []netip.Prefix
		want    string
		wantKey string
	}{
		{name: "peer, no proxies", peer: "203.0.113.7:5555", want: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forged header from untrusted peer is ignored", peer: "203.0.113.7:5555", xff: []string{"1.2.3.4"}, trusted: proxies, want: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forged header with no proxies configured", peer: "203.0.113.7:5555", xff: []string{"1.2.3.4"}, want: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "trusted peer, one entry", peer: "10.1.1.1:80", xff: []string{"198.51.100.9"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "right-most untrusted wins over a spoofed left part", peer: "10.1.1.1:80", xff: []string{"6.6.6.6, 198.51.100.9, 10.2.2.2"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "multiple header lines are one list", peer: "10.1.1.1:80", xff: []string{"6.6.6.6", "198.51.100.9", "10.2.2.2,10.3.3.3"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "spaces and empty entries", peer: "10.1.1.1:80", xff: []string{"  198.51.100.9 ,, 10.2.2.2 ,"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "all entries trusted: left-most", peer: "10.1.1.1:80", xff: []string{"10.9.9.9, 10.2.2.2"}, trusted: proxies, want: "10.9.9.9", wantKey: "10.9.9.9"},
		{name: "trusted peer without header", peer: "10.1.1.1:80", trusted: proxies, want: "10.1.1.1", wantKey: "10.1.1.1"},
		{name: "malformed entry falls back to the peer", peer: "10.1.1.1:80", xff: []string{"198.51.100.9, garbage, 10.2.2.2"}, trusted: proxies, want: "10.1.1.1", wantKey: "10.1.1.1"},
		{name: "malformed left of the client is never reached", peer: "10.1.1.1:80", xff: []string{"garbage, 198.51.100.9"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "non-canonical IPv4 is malformed", peer: "10.1.1.1:80", xff: []string{"198.051.100.9"}, trusted: proxies, want: "10.1.1.1", wantKey: "10.1.1.1"},
		{name: "entry with port", peer: "10.1.1.1:80", xff: []string{"198.51.100.9:4711"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "bracketed IPv6 entry with port", peer: "10.1.1.1:80", xff: []string{"[2001:db8:1:2::5]:443"}, trusted: proxies, want: "2001:db8:1:2::5", wantKey: "2001:db8:1:2::/64"},
		{name: "bracketed IPv6 entry", peer: "10.1.1.1:80", xff: []string{"[2001:db8::5]"}, trusted: proxies, want: "2001:db8::5", wantKey: "2001:db8::/64"},
		{name: "IPv6 peer keyed by /64", peer: "[2001:db8:aa:bb:1:2:3:4]:5555", want: "2001:db8:aa:bb:1:2:3:4", wantKey: "2001:db8:aa:bb::/64"},
		{name: "IPv6 peers in one /64 share a key", peer: "[2001:db8:aa:bb:ffff::1]:1", want: "2001:db8:aa:bb:ffff::1", wantKey: "2001:db8:aa:bb::/64"},
		{name: "IPv6 trusted proxy", peer: "[fd00::1]:80", xff: []string{"2001:db8::7, fd00::2"}, trusted: proxies, want: "2001:db8::7", wantKey: "2001:db8::/64"},
		{name: "IPv4-mapped peer is IPv4", peer: "[::ffff:203.0.113.7]:80", want: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "IPv4-mapped trusted proxy", peer: "[::ffff:10.1.1.1]:80", xff: []string{"198.51.100.9"}, trusted: proxies, want: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "zone dropped", peer: "[fe80::1%eth0]:80", want: "fe80::1", wantKey: "fe80::/64"},
		{name: "peer without port", peer: "203.0.113.7", want: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "unparseable peer keys by its text", peer: "@", want: "invalid IP", wantKey: "@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ip, key := Resolve(tt.peer, tt.xff, tt.trusted)
			if ip.String() != tt.want || key != tt.wantKey {
				t.Errorf("Resolve(%q, %q) = %v, %q; want %s, %q", tt.peer, tt.xff, ip, key, tt.want, tt.wantKey)
			}
			if ip.IsValid() && Key(ip) != key {
				t.Errorf("Key(%v) = %q, fast key %q", ip, Key(ip), key)
			}
		})
	}
}

func TestResolveIPv4AllocatesNothing(t *testing.T) {
	trusted := prefixes("10.0.0.0/8")
	xff := []string{"6.6.6.6, 198.51.100.9, 10.2.2.2"}
	if n := testing.AllocsPerRun(100, func() { Resolve("10.1.1.1:80", xff, trusted) }); n != 0 {
		t.Fatalf("behind a proxy: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { Resolve("203.0.113.7:5555", nil, nil) }); n != 0 {
		t.Fatalf("direct: %v allocs", n)
	}
}

// FuzzResolve: any header from any peer resolves without panicking; an
// untrusted peer is always the client; behind a proxy the client is the
// peer or an address that appears in the header, and the key is always
// Key of the result.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4, 10.0.0.1", "[::1]:80", "garbage", " , ,", "2001:db8::1%eth0", "::ffff:1.2.3.4", "1.2.3.4:99999"} {
		f.Add("10.1.1.1:80", s)
		f.Add("203.0.113.7:1", s)
	}
	trusted := prefixes("10.0.0.0/8", "fd00::/8")
	f.Fuzz(func(t *testing.T, peer, header string) {
		ip, key := Resolve(peer, []string{header}, trusted)
		p, _, ok := parseHostPort(peer)
		if !ok {
			if ip.IsValid() || key != peer {
				t.Fatalf("unparseable peer %q resolved to %v %q", peer, ip, key)
			}
			return
		}
		if !inAny(p, trusted) && ip != p {
			t.Fatalf("untrusted peer %v, header %q: client %v", p, header, ip)
		}
		if key != Key(ip) {
			t.Fatalf("key %q != Key(%v) %q", key, ip, Key(ip))
		}
	})
}
