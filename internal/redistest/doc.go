// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port with no persistence, a 3-node Redis
// Cluster, and a primary with one replica watched by three Sentinels. Each
// is stopped by t.Cleanup. A test that needs Redis skips, saying so, when
// redis-server (or, for the cluster, redis-cli; for Sentinel,
// redis-sentinel) is missing, and fails instead under
// RTSERVER_REQUIRE_INTEGRATION=1, which scripts/test.sh sets
// (testkit.Program).
package redistest
