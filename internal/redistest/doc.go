// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port with no persistence, and a 3-node Redis
// Cluster. Each is stopped by t.Cleanup. A test that needs Redis fails
// (it does not skip) when redis-server is missing: CI installs it.
package redistest
