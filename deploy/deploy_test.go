package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

const (
	dashboardFile  = "grafana/rtserver.json"
	rulesFile      = "prometheus/alerts.yml"
	rulesTestFile  = "prometheus/alerts_test.yml"
	operationsFile = "../docs/operations.md"
)

// ---------------------------------------------------------------------------
// What the server exports.

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedNames is every metric name a server with an empty namespace
// exposes: each collector in metrics.Metrics (read from its descriptors, so
// vectors that have no child yet count too), the TopN gauges (which have no
// exported collector: one child is set), and everything the registry
// gathers (the Go and process collectors). Summary and histogram families
// also answer to their _sum, _count and _bucket series.
func exportedNames(t *testing.T) (all map[string]bool, own []string) {
	t.Helper()
	// As the binary does: rtserver's metrics, and the Go and process
	// collectors it registers beside them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	all = map[string]bool{}
	ownSet := map[string]bool{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() || f.IsNil() {
			continue
		}
		if _, isReg := f.Interface().(*prometheus.Registry); isReg {
			continue // the Go and process collectors: gathered below
		}
		switch c := f.Interface().(type) {
		case *metrics.TopN:
			c.Set(map[string]float64{"probe": 1})
		case prometheus.Collector:
			ch := make(chan *prometheus.Desc, 16)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				sm := fqNameRE.FindStringSubmatch(d.String())
				if sm == nil {
					t.Fatalf("field %s: cannot read the name of %s", v.Type().Field(i).Name, d)
				}
				ownSet[sm[1]] = true
			}
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		name := fam.GetName()
		all[name] = true
		switch fam.GetType() {
		case dto.MetricType_SUMMARY, dto.MetricType_HISTOGRAM:
			all[name+"_sum"], all[name+"_count"], all[name+"_bucket"] = true, true, true
		}
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			ownSet[name] = true
		}
	}
	for n := range ownSet {
		all[n] = true
		own = append(own, n)
	}
	sort.Strings(own)
	if len(own) < 23 { // docs/metrics.md names 23 besides the two additions
		t.Fatalf("found only %d rtserver metrics: %v", len(own), own)
	}
	return all, own
}

func TestExportedNamesSeeEveryCollector(t *testing.T) {
	all, own := exportedNames(t)
	// Vectors without children (admission_*), TopN gauges, func gauges and
	// the Go/process collectors must all be seen, or the checks below
	// would report false alarms.
	for _, n := range []string{
		"admission_accepted_total", "admission_rejected_total", "admission_rule_errors_total",
		"ws_topic_publish_rate", "cluster_topic_publish_bytes", "connections_open", "handshake_inflight",
		"protocol_errors_total", "bus_messages_dropped_total",
	} {
		if !slices.Contains(own, n) {
			t.Errorf("%s is not among the rtserver metrics found: %v", n, own)
		}
	}
	for _, n := range []string{"go_goroutines", "process_resident_memory_bytes", "go_gc_duration_seconds_count"} {
		if !all[n] {
			t.Errorf("%s is not among the exported names", n)
		}
	}
}

// ---------------------------------------------------------------------------
// A small PromQL scanner: enough to pull metric names out of the queries we
// write, not a parser.

var (
	// Label lists after grouping modifiers hold label names, not metrics.
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaRE  = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	// Words that are not metric names when not followed by '('.
	promqlWords = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
		"inf": true, "nan": true, "start": true, "end": true,
		// Aggregation operators may be followed by a modifier, not '('.
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true,
	}
)

// stripDelimited removes what lies between open and close (kept), skipping
// over quoted strings, which are removed whole.
func stripDelimited(s string) string {
	var b strings.Builder
	depth := 0 // inside {...} or [...]
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\'', '`':
			// Skip the string literal, honouring backslash escapes.
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j
			b.WriteByte(' ')
			continue
		case '{', '[':
			if depth == 0 {
				b.WriteByte(c)
			}
			depth++
			continue
		case '}', ']':
			if depth > 0 {
				depth--
			}
			if depth == 0 {
				b.WriteByte(c)
			}
			continue
		}
		if depth == 0 {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// promqlMetrics returns the metric names an expression selects, in order of
// appearance, without repeats.
func promqlMetrics(expr string) []string {
	s := grafanaRE.ReplaceAllString(expr, " ")
	s = stripDelimited(s)
	s = groupingRE.ReplaceAllString(s, "$1 ")
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' || c == '.':
			// A number or duration (5m, 1e3, 0x1f, 1h30m): one token.
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
				k++
			}
			isCall := k < len(s) && s[k] == '('
			if !isCall && !promqlWords[strings.ToLower(word)] && !slices.Contains(out, word) {
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	return out
}

func TestPromqlMetrics(t *testing.T) {
	tests := []struct {
		give string
		want []string
	}{
		{give: `up`, want: []string{"up"}},
		{give: `sum by (reason) (rate(handshake_rejected_total{instance=~"$instance", reason!="x{y}"}[$__rate_interval]))`,
			want: []string{"handshake_rejected_total"}},
		{give: `sum(rate(a_total[5m])) by (instance) / on (class) group_left (reason) b`, want: []string{"a_total", "b"}},
		{give: `topk(10, max by (topic) (cluster_topic_publish_rate{topic="sum(x)"}))`, want: []string{"cluster_topic_publish_rate"}},
		{give: `rate(x[1h] offset 5m) > 3 * (y or 0 * z) and bool w`, want: []string{"x", "y", "z", "w"}},
		{give: `instance:handshake_shed:rate5m / (instance:handshake_accepted:rate5m + 1e3)`,
			want: []string{"instance:handshake_shed:rate5m", "instance:handshake_accepted:rate5m"}},
		{give: `max_over_time(g[1h:5m]) < g`, want: []string{"g"}},
		{give: "histogram_quantile(0.99, sum without (le) (rate(h_bucket[5m])))", want: []string{"h_bucket"}},
		{give: `count(count by (instance) (up{job='a\'b'}))`, want: []string{"up"}},
		{give: `label_replace(a, "dst", "$1", "src", "(.*)")`, want: []string{"a"}},
		{give: `process_resident_memory_bytes{instance=~"${instance}"} / (connections_open > 100)`,
			want: []string{"process_resident_memory_bytes", "connections_open"}},
	}
	for _, tt := range tests {
		if got := promqlMetrics(tt.give); !slices.Equal(got, tt.want) {
			t.Errorf("promqlMetrics(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// ---------------------------------------------------------------------------
// The dashboard.

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Requires []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"__requires"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource *datasource     `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	UID   string `json:"uid"`
	Title string `json:"title"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows: the panels of a collapsed row live inside it.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

const dsRef = "${DS_PROMETHEUS}"

func TestDashboardIsImportable(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	hasInput := slices.ContainsFunc(d.Inputs, func(in struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	}) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	})
	if !hasInput {
		t.Errorf("__inputs must declare DS_PROMETHEUS, a prometheus datasource: %+v", d.Inputs)
	}
	var needs []string
	for _, r := range d.Requires {
		needs = append(needs, r.Type+"/"+r.ID)
	}
	if !slices.Contains(needs, "datasource/prometheus") || !slices.Contains(needs, "grafana/grafana") {
		t.Errorf("__requires must name grafana and the prometheus datasource: %v", needs)
	}

	var instance bool
	for _, v := range d.Templating.List {
		if v.Name != "instance" {
			continue
		}
		instance = true
		if v.Type != "query" || v.Datasource == nil || v.Datasource.UID != dsRef {
			t.Errorf("variable instance: type %q datasource %+v, want a query on %s", v.Type, v.Datasource, dsRef)
		}
		if !bytes.Contains(v.Query, []byte("label_values(connections_open, instance)")) {
			t.Errorf("variable instance: query %s, want label_values(connections_open, instance)", v.Query)
		}
	}
	if !instance {
		t.Error("no template variable named instance")
	}

	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsRef || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want prometheus %s", p.Title, p.Datasource, dsRef)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: empty expr", p.Title)
			}
			if tg.Datasource != nil && tg.Datasource.UID != dsRef {
				t.Errorf("panel %q: target datasource %+v, want %s", p.Title, tg.Datasource, dsRef)
			}
			if refs[tg.RefID] {
				t.Errorf("panel %q: refId %q repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: query %q ignores the instance variable", p.Title, tg.Expr)
			}
		}
	}
}

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	exported, own := exportedNames(t)
	d := loadDashboard(t)
	used := map[string]bool{}
	check := func(where, expr string) {
		names := promqlMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s: %q uses %s, which the server does not export", where, expr, n)
			}
		}
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([^,)]+)`)
	for _, v := range d.Templating.List {
		for _, m := range labelValues.FindAllStringSubmatch(string(v.Query), -1) {
			check("variable "+v.Name, m[1])
		}
	}
	// The other way round: a metric the server exports but nobody can see
	// is a dashboard that fell behind the code.
	for _, n := range own {
		if !used[n] {
			t.Errorf("the dashboard has no panel for %s", n)
		}
	}
}

// ---------------------------------------------------------------------------
// The rules.

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return out
}

func alertNames(t *testing.T) []string {
	var names []string
	for _, r := range loadRules(t) {
		if r.Alert != "" {
			names = append(names, r.Alert)
		}
	}
	return names
}

func TestRulesUseExportedMetrics(t *testing.T) {
	exported, _ := exportedNames(t)
	rules := loadRules(t)
	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	for _, r := range rules {
		name := r.Alert + r.Record
		names := promqlMetrics(r.Expr)
		if len(names) == 0 {
			t.Errorf("rule %s: no metric found in %q", name, r.Expr)
		}
		for _, n := range names {
			if !exported[n] && !recorded[n] {
				t.Errorf("rule %s uses %s, which the server does not export and no rule records", name, n)
			}
		}
	}
}

func TestAlertsAreActionable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "Rtserver") {
			t.Errorf("alert %s: names start with Rtserver", r.Alert)
		}
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		if strings.Contains(r.Annotations["runbook"], "\n") {
			t.Errorf("alert %s: runbook is one line", r.Alert)
		}
		if r.For == "" {
			t.Errorf("alert %s fires on a single evaluation: give it a for duration", r.Alert)
		}
	}
}

func promtool(t *testing.T) string {
	t.Helper()
	return testkit.Program(t, "promtool", "apt-get install prometheus; scripts/test.sh installs it")
}

func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
}

// TestAlertRulesUnitTests runs alerts_test.yml as an operator does, from
// the repository's root: each alert fires on the series it is meant for,
// with its labels and annotations, and stays silent on the look-alikes.
func TestAlertRulesUnitTests(t *testing.T) {
	bin := promtool(t)
	cmd := exec.Command(bin, "test", "rules", "deploy/"+rulesTestFile)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules deploy/%s: %v\n%s", rulesTestFile, err, out)
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}

	// Every alert has at least one test that expects it to fire.
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tests, &tf); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, a := range alertNames(t) {
		if !fires[a] {
			t.Errorf("%s: no test in %s expects %s to fire", a, rulesTestFile, a)
		}
	}
}

// ---------------------------------------------------------------------------
// The docs.

var alertHeadingRE = regexp.MustCompile(`(?m)^###\s+(Rtserver[A-Za-z0-9]*)\s*$`)

// TestOperationsDocumentsEveryAlert: an operator paged by an alert finds a
// section of that name in docs/operations.md, and every such section is a
// live alert.
func TestOperationsDocumentsEveryAlert(t *testing.T) {
	raw, err := os.ReadFile(operationsFile)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range alertHeadingRE.FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = true
	}
	alerts := alertNames(t)
	for _, a := range alerts {
		if !documented[a] {
			t.Errorf("%s has no \"### %s\" section", operationsFile, a)
		}
	}
	for a := range documented {
		if !slices.Contains(alerts, a) {
			t.Errorf("%s documents %s, which %s does not define", operationsFile, a, rulesFile)
		}
	}
}
