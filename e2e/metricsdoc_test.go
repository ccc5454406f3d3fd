package e2e

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// familiesWithoutKnownLabels are the families of docs/metrics.md that a
// fresh instance cannot export: their labels are topics clients publish
// on, known only once a topic enters a top-N.
var familiesWithoutKnownLabels = map[string]string{
	"ws_topic_publish_rate":       "topic label: this instance's top-N topics, none before the first publish",
	"cluster_topic_publish_rate":  "topic label: the fleet's top-N topics, none before the first publish",
	"cluster_topic_publish_bytes": "topic label: the fleet's top-N topics, none before the first publish",
}

// Every family docs/metrics.md lists is in the first scrape of a fresh
// instance, before any client connects, so dashboards and alerts work from
// start-up: label values known in advance (reasons, results, close codes,
// configured classes, namespaces and API methods) are exported at 0. The
// config gives every label that comes from configuration a value: an
// admission class with an adaptive concurrency limit, a namespace, an API
// key. The families exempt above are the only ones allowed to be missing.
func TestEveryDocumentedMetricFamilyExistsFromStart(t *testing.T) {
	leakcheck.Check(t)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var families []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (counter|gauge) \\|").FindAllSubmatch(doc, -1) {
		families = append(families, string(m[1]))
	}
	if len(families) < 40 {
		t.Fatalf("found only %d metric rows in docs/metrics.md (the table's shape changed?): %v", len(families), families)
	}
	for name := range familiesWithoutKnownLabels {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("exempt family %s is no longer in docs/metrics.md: drop it from the exemptions", name)
		}
	}

	p := start(t, `
api: {key: metrics-from-start}
topics:
  namespaces:
    - {pattern: "news:*", subscribe: [any], publish: []}
admission:
  classes:
    llm: {adaptiveConcurrency: {min: 2, max: 8}}
  methods: {ask: llm}
`)
	resp, err := httpClient.Get(p.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sampled := map[string]bool{}
	for line := range strings.Lines(string(body)) {
		if line == "" || line[0] == '#' {
			continue
		}
		sampled[line[:strings.IndexAny(line, "{ ")]] = true
	}
	for _, name := range families {
		_, exempt := familiesWithoutKnownLabels[name]
		switch {
		case !sampled[name] && !exempt:
			t.Errorf("%s is documented in docs/metrics.md but has no series on a fresh instance: export its known label values at 0", name)
		case sampled[name] && exempt:
			t.Errorf("%s is exempt as having no label values known in advance, but a fresh instance exports it: drop the exemption", name)
		}
	}
}
