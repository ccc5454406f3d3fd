package kubernetes

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
)

// finalClose is how long rtserver takes at most, after drain.duration,
// to close what is left before it exits (docs/operations.md, "Drain and
// rolling deploys", step 4).
const finalClose = 10 * time.Second

// minMargin is the least slack the grace period must leave above the
// preStop pause, the drain and the final close, for a slow node.
const minMargin = 5 * time.Second

type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	configMap  *corev1.ConfigMap
}

// decodeStrict decodes one manifest into the API type its kind names;
// an unknown or misspelt field, or a field given twice, is an error.
func decodeStrict(data []byte, m *manifests) error {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return err
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		m.deployment = new(appsv1.Deployment)
		obj = m.deployment
	case "v1 Service":
		m.service = new(corev1.Service)
		obj = m.service
	case "policy/v1 PodDisruptionBudget":
		m.pdb = new(policyv1.PodDisruptionBudget)
		obj = m.pdb
	case "v1 ConfigMap":
		m.configMap = new(corev1.ConfigMap)
		obj = m.configMap
	default:
		return &unknownKind{meta.APIVersion, meta.Kind}
	}
	// As the API server reads it: YAML (no key twice) to JSON, decoded
	// case-sensitively (encoding/json, and so yaml.UnmarshalStrict, would
	// take "prestop" for preStop), with no unknown field.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

type unknownKind struct{ apiVersion, kind string }

func (u *unknownKind) Error() string {
	return "no test decodes " + u.apiVersion + " " + u.kind + ": add it to decodeStrict"
}

func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "\n---") {
			t.Fatalf("%s: one object per file, so each file's name says what it holds", f)
		}
		if err := decodeStrict(data, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if m.deployment == nil || m.service == nil || m.pdb == nil || m.configMap == nil {
		t.Fatalf("missing manifests: %+v", m)
	}
	return m
}

// A misspelt field is an error, not a silently ignored key: what the
// manifests test relies on.
func TestStrictDecodingCatchesMisspeltFields(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to string }{
		{"readinessProbe:", "readynessProbe:"},
		{"terminationGracePeriodSeconds:", "terminationGracePeriod:"},
		{"preStop:", "prestop:"},
	} {
		bad := strings.Replace(string(data), c.from, c.to, 1)
		if bad == string(data) {
			t.Fatalf("deployment.yaml has no %q", c.from)
		}
		if err := decodeStrict([]byte(bad), new(manifests)); err == nil {
			t.Errorf("%s misspelt as %s: decoded without an error", c.from, c.to)
		}
	}
}

// The manifests agree with each other, with the binary and with
// docs/operations.md: the config loads and validates as the binary would
// load it (file, then the Deployment's variables), the probes are the
// ones the docs name, ports and labels line up, the image is this release,
// and the grace period covers the preStop pause, the drain and the final
// close with a margin.
func TestManifestsAgree(t *testing.T) {
	t.Parallel()
	m := load(t)
	pod := m.deployment.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The configuration, as the binary loads it.
	const mount = "/etc/rtserver"
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %v do not name --config", c.Args)
	}
	key, ok := strings.CutPrefix(c.Args[i+1], mount+"/")
	if !ok {
		t.Fatalf("--config %s is not under the mount %s", c.Args[i+1], mount)
	}
	file, ok := m.configMap.Data[key]
	if !ok {
		t.Fatalf("the ConfigMap has no key %q", key)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && vm.MountPath == mount && v.ConfigMap != nil && v.ConfigMap.Name == m.configMap.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the ConfigMap %s is not mounted at %s", m.configMap.Name, mount)
	}
	cfg := rtserver.DefaultConfig()
	if err := conf.DecodeYAML(&cfg, []byte(file), "configmap.yaml:"+key); err != nil {
		t.Fatal(err)
	}
	var environ []string
	secrets := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			// Stand-ins of a valid shape, so the names are checked.
			environ = append(environ, e.Name+"=stand-in-secret-of-thirty-two-bytes")
			secrets[e.Name] = e.ValueFrom.SecretKeyRef.Name
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		}
	}
	if err := conf.ApplyEnv(&cfg, environ, "RTSERVER_"); err != nil {
		t.Fatalf("the Deployment's variables: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the fleet config does not validate: %v", err)
	}

	// Ports: the listeners the variables set are the container's ports,
	// the probes use the clients' one, the Service targets it and
	// Prometheus scrapes the admin one.
	portOf := func(name, addr string) int32 {
		t.Helper()
		host, p, err := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		if err != nil || host != "0.0.0.0" {
			t.Errorf("%s is %q, want 0.0.0.0:PORT (every interface of the pod)", name, addr)
		}
		return int32(n)
	}
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	if got := portOf("listen", cfg.Listen); named["http"] != got {
		t.Errorf("listen port %d, container port http %d", got, named["http"])
	}
	if got := portOf("adminListen", cfg.AdminListen); named["admin"] != got {
		t.Errorf("adminListen port %d, container port admin %d", got, named["admin"])
	}
	probe := func(what string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s: want an HTTP GET of %s on port http, got %+v", what, path, p)
		}
	}
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	probe("livenessProbe", c.LivenessProbe, "/healthz")
	if len(m.service.Spec.Ports) != 1 || m.service.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("the Service's ports %+v, want one, targeting http (not the admin port)", m.service.Spec.Ports)
	}
	ann := pod.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(int(named["admin"])) {
		t.Errorf("scrape annotations %v, want /metrics on the admin port %d", ann, named["admin"])
	}

	// Labels: the Service, the PodDisruptionBudget and the Deployment's
	// selector all pick the pods the template makes.
	for what, sel := range map[string]map[string]string{
		"Service":                        m.service.Spec.Selector,
		"PodDisruptionBudget":            m.pdb.Spec.Selector.MatchLabels,
		"Deployment selector":            m.deployment.Spec.Selector.MatchLabels,
		"topology spread label selector": pod.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels,
	} {
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if pod.Labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not carry", what, k, v)
			}
		}
	}
	if u := m.pdb.Spec.MaxUnavailable; u == nil || u.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", u)
	}
	ru := m.deployment.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("rolling update %+v, want maxSurge 1, maxUnavailable 0: one pod drains at a time", ru)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	if want := ":" + rtserver.Version(); !strings.HasSuffix(c.Image, want) {
		t.Errorf("image %s, want the release's tag %s", c.Image, want)
	}
	for name, secret := range secrets {
		if secret != "rtserver" {
			t.Errorf("%s comes from the Secret %s; docs/operations.md creates rtserver", name, secret)
		}
	}

	// The drain arithmetic.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatal("no preStop exec hook: endpoints may still send clients to a draining pod")
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) != 2 || cmd[0] != "sleep" {
		t.Fatalf("preStop runs %v, want sleep SECONDS", cmd)
	}
	secs, err := strconv.Atoi(cmd[1])
	if err != nil || secs < 1 {
		t.Fatalf("preStop sleeps %q, want whole seconds >= 1", cmd[1])
	}
	preStop := time.Duration(secs) * time.Second
	g := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatal("no terminationGracePeriodSeconds: the default 30s is not derived from drain.duration")
	}
	grace := time.Duration(*g) * time.Second
	need := preStop + cfg.Drain.Duration + finalClose
	if grace < need+minMargin {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain.duration %v + final close %v + margin %v",
			grace, preStop, cfg.Drain.Duration, finalClose, minMargin)
	}
	t.Logf("grace %v = preStop %v + drain %v + final close %v + margin %v", grace, preStop, cfg.Drain.Duration, finalClose, grace-need)
}
