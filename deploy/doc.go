// Package deploy holds what an operator imports next to the rtserver binary,
// and the tests that keep it true to the code:
//
//   - grafana/rtserver.json: a Grafana 10+ dashboard (import it and pick the
//     Prometheus data source for the DS_PROMETHEUS input);
//   - prometheus/alerts.yml: recording and alerting rules; every alert has a
//     severity label, a runbook annotation and a section under "What each
//     alert means" in docs/operations.md;
//   - prometheus/alerts_test.yml: promtool unit tests of those rules.
//
// The package has no Go code to import. Its tests check that every metric
// named in a dashboard query or a rule expression is one the server exports
// (metrics.New with an empty namespace, plus the Go and process collectors
// the binary registers),
// that every rtserver metric appears on the dashboard, that `promtool check
// rules` and `promtool test rules` pass (promtool is required, not optional:
// scripts/test.sh installs it), and that docs/operations.md documents every
// alert.
//
// The files assume metrics.namespace is empty. With a namespace N, every
// rtserver metric and the process_* metrics are named N_...; go_* keep
// their names. Edit the queries accordingly.
package deploy
