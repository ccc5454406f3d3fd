package admitgrpc

import (
	"context"
	"net"
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
		if got := g.clientKey(ctx); got != want {
			t.Errorf("%v: key %q, Resolve %q", a, got, want)
		}
	}
	if got := g.clientKey(context.Background()); got != "" {
		t.Errorf("no peer: key %q", got)
	}
}
