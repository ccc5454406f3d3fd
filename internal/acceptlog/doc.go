// Package acceptlog makes running out of file descriptors visible.
//
// When the process (EMFILE) or the system (ENFILE) has no descriptor left,
// accept fails; net/http survives it (it sleeps and retries, up to a
// second) but says so only at debug level, so an instance at its limit
// silently stops taking connections. Listener counts every such failure
// and logs it at error level, under one constant message so that the
// node's rate-limited logger (internal/logx) writes it at most once per
// interval with the number suppressed, however fast accept fails.
//
// Must never: change what Accept returns (the server's retry is what
// survives the shortage), or log per failure without a limit.
package acceptlog
