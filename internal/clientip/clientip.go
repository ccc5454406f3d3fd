package clientip

import (
	"net/http"
	"net/netip"
	"strings"
)

// Key is the rate-limit key of a client address: the address for IPv4,
// its /64 prefix for IPv6 (one subscriber usually holds a whole /64), and
// "" for the invalid address.
func Key(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return ""
	case ip.Is4():
		return ip.String()
	default:
		p, _ := ip.Prefix(64)
		return p.String()
	}
}

// Resolve resolves the client address of a request that arrived from the
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
// IPv4-mapped IPv6 addresses are unmapped and zones dropped. The address
// is invalid only when remoteAddr itself cannot be parsed; the key is then
// remoteAddr's raw text, so such clients (a unix socket, a test) still
// share one limit rather than none. The key is Key(address) otherwise, and
// for an IPv4 client it is computed without allocating.
func Resolve(remoteAddr string, xff []string, trusted []netip.Prefix) (netip.Addr, string) {
	peer, text, ok := parseHostPort(remoteAddr)
	if !ok {
		// Not ip:port (a unix socket, a test): key by the raw text so such
		// clients still share one limit rather than none.
		return netip.Addr{}, remoteAddr
	}
	if len(trusted) == 0 || !inAny(peer, trusted) || len(xff) == 0 {
		return peer, keyOf(peer, text)
	}
	var left netip.Addr
	var leftText string
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for line != "" {
			var entry string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				entry, line = line, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue // "a, , b" or a trailing comma: not an address, nothing claimed
			}
			ip, t, ok := parseEntry(entry)
			if !ok {
				return peer, keyOf(peer, text)
			}
			if !inAny(ip, trusted) {
				return ip, keyOf(ip, t)
			}
			left, leftText = ip, t
		}
	}
	if left.IsValid() {
		return left, keyOf(left, leftText)
	}
	return peer, keyOf(peer, text)
}

// parseHostPort parses "ip:port" or "[ip]:port" (and, leniently, a bare
// ip) into a normalised address and the host text it came from. The port
// is not validated (net/http's RemoteAddr always has a good one; in a
// forwarded entry it is ignored). It picks the parser by shape because a
// failed parse allocates its error, and this runs on every upgrade.
func parseHostPort(s string) (netip.Addr, string, bool) {
	host := s
	switch {
	case len(s) > 0 && s[0] == '[':
		end := strings.LastIndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && s[end+1] != ':') {
			return netip.Addr{}, "", false
		}
		host = s[1:end]
	case strings.Count(s, ":") == 1:
		host = s[:strings.IndexByte(s, ':')]
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	ip, ok := normalise(ip)
	return ip, host, ok
}

// parseEntry parses one X-Forwarded-For entry: an address, optionally
// with a port, IPv6 optionally in brackets.
func parseEntry(s string) (netip.Addr, string, bool) {
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is6() {
			return netip.Addr{}, "", false
		}
		ip, ok := normalise(ip)
		return ip, s, ok
	}
	return parseHostPort(s)
}

func normalise(ip netip.Addr) (netip.Addr, bool) {
	ip = ip.Unmap().WithZone("")
	return ip, ip.IsValid()
}

// keyOf is Key(ip), reusing text when it is already the canonical IPv4
// form so the common case allocates nothing.
func keyOf(ip netip.Addr, text string) string {
	if ip.Is4() && len(text) <= len("255.255.255.255") && strings.IndexByte(text, ':') < 0 {
		return text
	}
	return Key(ip)
}

func inAny(ip netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// FromRequest is Resolve for r: its RemoteAddr and, only when trusted is
// not empty, its X-Forwarded-For lines.
func FromRequest(r *http.Request, trusted []netip.Prefix) (netip.Addr, string) {
	var xff []string
	if len(trusted) > 0 {
		xff = r.Header["X-Forwarded-For"]
	}
	return Resolve(r.RemoteAddr, xff, trusted)
}
