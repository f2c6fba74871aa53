// Package deploy holds what runs Hourglass outside Go: the systemd unit
// (systemd/) and the Helm chart (helm/hourglass). Its tests check them
// with the real tools: systemd-analyze, and helm (template against the
// golden files in testdata/, lint).
package deploy

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what helm template renders")

// unitDirectives returns the unit file's directives: key to values, in
// order.
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// TestSystemdUnit checks the hardening the unit promises and has
// systemd-analyze verify it (and rate its exposure) where systemd is
// installed.
func TestSystemdUnit(t *testing.T) {
	unit := filepath.Join("systemd", "hourglass.service")
	d := unitDirectives(t, unit)
	for k, want := range map[string]string{
		"Type": "notify", "DynamicUser": "yes", "StateDirectory": "hourglass", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
		"Restart": "on-failure", "LimitNOFILE": "65536",
	} {
		if v, ok := d[k]; !ok || !slices.Contains(v, want) {
			t.Errorf("%s: %s=%v, want %s=%s", unit, k, v, k, want)
		}
	}
	if exec := strings.Join(d["ExecStart"], " "); !strings.Contains(exec, "serve --data-dir ${STATE_DIRECTORY}") {
		t.Errorf("%s: ExecStart=%s does not serve the StateDirectory", unit, exec)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian's systemd package has it): the unit was not verified")
	}
	// verify wants ExecStart's program to exist: point it at a stand-in
	// (the unit's other lines are checked as they are).
	dir := t.TempDir()
	stub := filepath.Join(dir, "hourglass")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "hourglass.service")
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(text, []byte("/usr/local/bin/hourglass"), []byte(stub)), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 after warnings such as an unknown key: any output
	// is a failure.
	if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	// The exposure systemd rates (0 best, 10 worst): the hardening must
	// keep it under 2.
	if out, err := exec.Command(analyze, "security", "--offline=true", "--threshold=20", copyPath).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (or failed): %v\n%s", err, out)
	}
}

// helmBin returns the helm to run: $HOURGLASS_HELM (CI installs a pinned
// one there), else helm on PATH; the test skips without either.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HOURGLASS_HELM"); h != "" {
		if _, err := os.Stat(h); err != nil {
			t.Fatalf("HOURGLASS_HELM=%s: %v", h, err)
		}
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not installed: set HOURGLASS_HELM (go install helm.sh/helm/v3/cmd/helm@v3.22.0, as .ci/run does)")
	}
	return h
}

// TestHelmChart renders the chart with helm template at the values of each
// case and compares it with its golden file (-update rewrites them), checks
// what each case must render, and runs helm lint --strict on each.
func TestHelmChart(t *testing.T) {
	helm := helmBin(t)
	chart := filepath.Join("helm", "hourglass")
	for _, tc := range []struct {
		name   string
		values string // in testdata/; "" for the chart's defaults
		want   []string
		not    []string
	}{
		{"default", "", []string{"kind: StatefulSet", "volumeClaimTemplates:", "storage: 10Gi", "grpc:\n              port: 7420\n              service: hourglass.v1.HourglassService",
			"path: /healthz", "readOnlyRootFilesystem: true", "runAsNonRoot: true", "runAsUser: 65532", `- "0.0.0.0:7420"`, "- /data", "clusterIP: None"},
			[]string{"kind: ServiceMonitor", "HOURGLASS_AUTH_TOKEN", "--tls-cert", "kind: Secret", "kind: ConfigMap", "--config"}},
		{"full", "full.values.yaml", []string{"kind: ServiceMonitor", "--tls-cert", "/etc/hourglass/tls/tls.crt", "secretName: hourglass-tls",
			"path: /readyz\n              port: api\n              scheme: HTTPS", "name: HOURGLASS_AUTH_TOKEN", "name: hourglass-token\n                  key: api-token",
			"bearerTokenSecret:\n        name: hourglass-token\n        key: api-token", "scheme: https", "storageClassName: fast-ssd",
			`image: "registry.example.com/hourglass:v1.2.0"`, `- "--fsync"`, "name: HOURGLASS_LOG_LEVEL",
			"kind: ConfigMap", "hourglass.toml: |\n    max-delay = \"30d\"\n    max-attempts = 8\n",
			"- --config\n            - /etc/hourglass/config/hourglass.toml", "checksum/config: "},
			[]string{"grpc:\n", "kind: Secret"}},
		{"token", "token.values.yaml", []string{"kind: Secret", "name: hourglass-auth", "token: \"bm90LWEtcmVhbC10b2tlbg==\"",
			"name: HOURGLASS_AUTH_TOKEN", "bearerTokenSecret:\n        name: hourglass-auth\n        key: token", "scheme: http\n",
			// The ServiceMonitor scrapes the API Service, not the headless one too.
			"matchLabels:\n      app.kubernetes.io/name: hourglass\n      app.kubernetes.io/instance: hourglass\n      app.kubernetes.io/component: api"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "hourglass", chart, "--namespace", "hourglass"}
			lint := []string{"lint", "--strict", chart}
			if tc.values != "" {
				args = append(args, "--values", filepath.Join("testdata", tc.values))
				lint = append(lint, "--values", filepath.Join("testdata", tc.values))
			}
			out, err := exec.Command(helm, args...).Output()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("the rendered chart lacks %q", w)
				}
			}
			for _, n := range tc.not {
				if bytes.Contains(out, []byte(n)) {
					t.Errorf("the rendered chart has %q", n)
				}
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./deploy -run TestHelmChart -update writes it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("helm template differs from %s (go test ./deploy -run TestHelmChart -update rewrites it):\n%s", golden, firstDiff(string(want), string(out)))
			}
			if out, err := exec.Command(helm, lint...).CombinedOutput(); err != nil {
				t.Errorf("helm %s: %v\n%s", strings.Join(lint, " "), err, out)
			}
		})
	}
	t.Run("tls_without_secret", func(t *testing.T) {
		out, err := exec.Command(helm, "template", "hourglass", chart, "--set", "tls.enabled=true").CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("tls.enabled needs tls.secretName")) {
			t.Errorf("tls.enabled without tls.secretName: %v\n%s; want a failure naming tls.secretName", err, out)
		}
	})
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// firstDiff shows the first line where want and got differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n  golden:   " + a + "\n  rendered: " + b
		}
	}
	return ""
}
