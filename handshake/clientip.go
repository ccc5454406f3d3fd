package handshake

import (
	"net/http"
	"net/netip"

	"github.com/rtserver/rtserver/internal/clientip"
)

// ClientIP resolves the client address of a request that arrived from the
// socket peer remoteAddr ("ip:port", as in http.Request.RemoteAddr) with
// the given X-Forwarded-For header lines.
//
// The peer is the client unless it is inside one of trusted: then the
// client is the right-most X-Forwarded-For entry that is not itself a
// trusted proxy (every line is one list, lines in order, entries separated
// by commas, spaces ignored; an entry may carry a port). If every entry is
// a trusted proxy, the left-most is the client. A malformed entry reached
// before the client is found makes the whole header untrustworthy: the
// peer is the client. Headers from an untrusted peer are never read, so a
// forged header changes nothing.
//
// IPv4-mapped IPv6 addresses are unmapped and zones dropped. The result is
// invalid only when remoteAddr itself cannot be parsed.
func ClientIP(remoteAddr string, xff []string, trusted []netip.Prefix) netip.Addr {
	ip, _ := clientip.Resolve(remoteAddr, xff, trusted)
	return ip
}

// IPKey is the rate-limit key of a client address: the address for IPv4,
// its /64 prefix for IPv6 (one subscriber usually holds a whole /64), and
// "" for the invalid address.
func IPKey(ip netip.Addr) string { return clientip.Key(ip) }

// requestClientIP resolves r's client and its key (allocation free for an
// IPv4 client).
func requestClientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, string) {
	return clientip.FromRequest(r, trusted)
}
