package metrics

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryMetricIsDocumented: docs/metrics.md is the reference of the
// exported metrics, so every metric of Metrics must have a row there, and
// every row must name a metric that exists.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, name := range metricNames(NewDiscard()) {
		exported[name] = true
	}
	rows := map[string]bool{}
	for _, match := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		rows[string(match[1])] = true
	}
	for name := range exported {
		if !rows[name] {
			t.Errorf("metric %s is exported but has no row in docs/metrics.md", name)
		}
	}
	for name := range rows {
		if !exported[name] {
			t.Errorf("docs/metrics.md has a row for %s, which is not exported", name)
		}
	}
	if len(exported) < 23 {
		t.Errorf("only %d metrics found in Metrics: %v", len(exported), exported)
	}
}

// metricNames lists the name of every collector held by a field of m,
// vectors included whether or not they have series yet.
func metricNames(m *Metrics) []string {
	descs := make(chan *prometheus.Desc, 16)
	go func() {
		v := reflect.ValueOf(m).Elem()
		for i := range v.NumField() {
			switch f := v.Field(i).Interface().(type) {
			case *TopN:
				f.vec.Describe(descs)
			case prometheus.Collector:
				f.Describe(descs)
			}
		}
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range descs {
		if s := fqName.FindStringSubmatch(d.String()); s != nil {
			names = append(names, s[1])
		}
	}
	return names
}
