// Package access decides who may subscribe to and publish on which topic:
// the topic grants of docs/access-control.md.
//
// A Config holds ordered namespaces, each a path.Match glob with at most
// one "{user}" placeholder and, per action, a list of grants; the first
// namespace whose pattern matches the topic decides, and the default rule
// decides topics no namespace matches. A grant list allows a call when any
// of its grants does, tried in the order listed; an empty list allows
// nobody. The built-in grants:
//
//   - any: everyone, anonymous connections included;
//   - authenticated: a connection with a JWT user;
//   - owner: the namespace's pattern holds {user}, and the topic's run in
//     {user}'s place is this connection's user. A {user} pattern decides
//     every topic of its shape ({user} read as one or more characters but
//     '/') whoever asks: another user's topic is refused there, never
//     passed on to later namespaces. A run holds neither '/' nor the
//     pattern's separators (the literal characters around {user}), so a
//     topic has at most one owner, and a user id holding one owns no
//     topic; anonymous connections own none;
//   - claim: the token's "topics" claim has a glob for this action that
//     matches the topic;
//   - proxy: an HTTP backend answers {"allow": bool} to a POST of the
//     question (see Proxy).
//
// An embedding application adds its own grants by name (Deps.Grants);
// they are listed in namespaces like the built-ins.
//
// Checker.Check answers Allow, Deny (the server answers -32003 with the
// topic) or Unavailable (a grant's backend failed and nothing else
// allowed: -32005). Topics starting with "__" are reserved for the server
// and are never granted, whatever the configuration says.
//
// Must never: allocate or block on the built-in grants (any,
// authenticated, owner, claim): patterns are compiled at New ({user}
// patterns into their shape and the two globs around {user}), and matched
// with path.Match on substrings. Only
// the proxy grant does I/O, and only when no grant listed before it
// allowed.
//
// Invariants:
//   - the proxy is asked each distinct question (action, topic, user,
//     connection, client IP) at most once at a time: concurrent identical
//     questions share one request (singleflight);
//   - with CacheTTL > 0, publish answers for authenticated users are kept
//     per (user, topic) for that long in a cache of at most 65,536
//     entries (two generations: when the young one is full it replaces
//     the old one, so memory is bounded and no lookup scans);
//   - every refused call is counted once in topic_denied_total{action},
//     every failed proxy request once in topic_proxy_errors_total{reason},
//     however many callers shared it.
package access
