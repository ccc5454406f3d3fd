// Package clusterrate decides the message tier's cluster-scoped rate and
// cost parts (scope: cluster) on Redis, so every instance of a fleet
// shares one budget per key.
//
// Each check is one round trip: a server-side Lua script (EVALSHA, falling
// back to EVAL once after a Redis restart or on a node that has not seen
// the script) that runs GCRA for every limit of the call (the rate and the
// cost of one class together) and charges all of them or none. Atomic on
// the server, so instances never race each other's read-modify-write.
//
// Keys are hash-tagged, {<prefix>adm:<class>:<by>:<key>}:rate and
// ...:cost: the limits of one call live in one Redis Cluster slot (the
// script may touch several keys), and different callers spread across
// slots. Each key expires a second after its bucket is full again, so
// idle callers cost Redis nothing.
//
// Time is the caller's clock in nanoseconds, with the local limiter's
// arithmetic (ratelimit.EmissionInterval: the period per unit rounded up
// to a whole nanosecond), so on the same timeline a cluster-scoped budget
// decides exactly as the local one, retry hints included (a property test
// holds them to it). Lua numbers are doubles, so absolute times travel as
// microseconds plus nanoseconds and the script only computes with
// differences from now; periods are limited to 2^53 ns (about 104 days).
// Instances whose clocks disagree by d see a budget shifted by at most d.
//
// Must never: hold a connection between checks, retry (a failure is
// returned at once and the caller decides by its fail policy), or wait
// longer than Options.Timeout.
package clusterrate
