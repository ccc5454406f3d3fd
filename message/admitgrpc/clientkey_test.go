package admitgrpc

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"google.golang.org/grpc/peer"

	"github.com/rtserver/rtserver/internal/clientip"
)

// TestClientKeyFastPathAgreesWithResolve: the TCP peer shortcut gives the
// key Resolve gives for the same address.
func TestClientKeyFastPathAgreesWithResolve(t *testing.T) {
	g := &guard{}
	for _, a := range []*net.TCPAddr{
		{IP: net.IPv4(192, 0, 2, 1), Port: 1},
		{IP: net.ParseIP("192.0.2.1").To4(), Port: 1},
		{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 443},
		{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 1},
		{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"},
		{IP: net.ParseIP("::1"), Port: 1},
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: a})
		_, want := clientip.Resolve(a.String(), nil, nil)
		for range 2 { // a miss, then a hit in the key cache
			if got := g.clientKey(ctx); got != want {
				t.Errorf("%v: key %q, Resolve %q", a, got, want)
			}
		}
	}
	if got := g.clientKey(context.Background()); got != "" {
		t.Errorf("no peer: key %q", got)
	}
}

// TestClientKeyCacheAgreesWithKey: whatever the cache holds (hits, misses,
// peers that collide in a slot and evict each other), the key is
// clientip.Key of the address.
func TestClientKeyCacheAgreesWithKey(t *testing.T) {
	var kc keyCache
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]netip.Addr, 0, 4*keyCacheSlots)
	for range 2 * keyCacheSlots {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))}))
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[0] = 0x20 // a global unicast address, not a mapped IPv4 one
		addrs = append(addrs, netip.AddrFrom16(b))
	}
	for range 20_000 {
		ip := addrs[r.IntN(len(addrs))]
		if got, want := kc.key(ip), clientip.Key(ip); got != want {
			t.Fatalf("%v: key %q, want %q", ip, got, want)
		}
	}
}

// TestClientKeyOfARepeatPeerAllocatesNothing: the second call from the same
// peer builds no string.
func TestClientKeyOfARepeatPeerAllocatesNothing(t *testing.T) {
	g := &guard{}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 50000}})
	g.clientKey(ctx)
	if n := testing.AllocsPerRun(1000, func() { g.clientKey(ctx) }); n != 0 {
		t.Errorf("clientKey of a repeat peer: %v allocs, want 0", n)
	}
}
