//go:build race

package wsock

// raceBuild: the race detector is on. It sees the order that a socket
// gives (one goroutine's write before another's read of those bytes) only
// through the syscall package's announced read and write, so the reads
// of socket_linux.go go through them in such builds.
const raceBuild = true
