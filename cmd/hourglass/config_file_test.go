package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/hourglassmq/hourglass/commitlog"
)

// parseServeConfig runs `hourglass serve args...` with an action that only
// parses (and returns its error, unlike parseServeArgs): the serveConfig the command line, environment and config file
// make.
func parseServeConfig(t *testing.T, args ...string) (*serveConfig, error) {
	t.Helper()
	app := newApp()
	var cfg *serveConfig
	for _, c := range app.Commands {
		if c.Name == "serve" {
			c.Action = func(c *cli.Context) (err error) {
				cfg, err = parseServe(c)
				return err
			}
		}
	}
	app.Writer, app.ErrWriter = &strings.Builder{}, &strings.Builder{}
	err := app.RunContext(context.Background(), append([]string{"hourglass", "serve"}, args...))
	return cfg, err
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hourglass.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigFile: the file sets flags; the environment and the command
// line win over it; what it may not hold is refused with its name.
func TestConfigFile(t *testing.T) {
	path := writeConfig(t, `fsync = "none"
max-attempts = 5
max-delay = "30d"
default-lease = "45s"
cors-origin = ["https://a.example", "https://b.example"]
pprof = true
`)
	cfg, err := parseServeConfig(t, "--config", path, "--data-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.node.Fsync != commitlog.SyncNone || cfg.node.MaxAttempts != 5 || cfg.node.MaxDelay != 30*24*time.Hour || cfg.node.DefaultLease != 45*time.Second ||
		!cfg.node.Pprof || !slices.Equal(cfg.node.CORSOrigins, []string{"https://a.example", "https://b.example"}) {
		t.Errorf("from the file: fsync %v, max-attempts %d, max-delay %v, lease %v, pprof %v, cors %q",
			cfg.node.Fsync, cfg.node.MaxAttempts, cfg.node.MaxDelay, cfg.node.DefaultLease, cfg.node.Pprof, cfg.node.CORSOrigins)
	}

	t.Setenv("HOURGLASS_MAX_ATTEMPTS", "7")
	t.Setenv("HOURGLASS_CONFIG", path)
	cfg, err = parseServeConfig(t, "--data-dir", t.TempDir(), "--fsync", "interval")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.node.MaxAttempts != 7 || cfg.node.Fsync != commitlog.SyncInterval || cfg.node.DefaultLease != 45*time.Second {
		t.Errorf("env and flag over the file: max-attempts %d (want 7), fsync %v (want interval), lease %v (want the file's 45s)",
			cfg.node.MaxAttempts, cfg.node.Fsync, cfg.node.DefaultLease)
	}
	os.Unsetenv("HOURGLASS_CONFIG")

	for _, tc := range []struct{ name, text, want string }{
		{"unknown_key", "max-attempt = 5\n", `unknown key "max-attempt": keys are serve's flag names without -- (did you mean "max-attempts"?)`},
		{"unknown_far", "colour = \"red\"\n", `unknown key "colour": keys are serve's flag names without --`},
		{"table", "[limits]\nmax-streams = 5\n", "[limits] is a table"},
		{"config_key", "config = \"other.toml\"\n", "cannot name another"},
		{"wrong_type", "max-streams = \"many\"\n", "max-streams"},
		{"not_toml", "fsync: always\n", "not TOML"},
		{"checked_as_flags", "fsync = \"sometimes\"\n", "--fsync \"sometimes\": want always, interval or none"},
	} {
		_, err := parseServeConfig(t, "--config", writeConfig(t, tc.text), "--data-dir", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := parseServeConfig(t, "--config", filepath.Join(t.TempDir(), "none.toml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: err = %v", err)
	}
}

// commentedSetting is a line of the example that is a setting commented
// out: "# key = value", maybe with a comment after it.
var commentedSetting = regexp.MustCompile(`^# ([a-z][a-z0-9-]*) = (.*)$`)

// TestConfigExample loads docs/hourglass.example.toml as serve would and
// checks that it names every serve flag, live or commented out, each
// commented setting with a value of the type its flag takes.
func TestConfigExample(t *testing.T) {
	example := filepath.Join("..", "..", "docs", "hourglass.example.toml")
	cfg, err := parseServeConfig(t, "--config", example, "--data-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:7420" || cfg.node.Fsync != commitlog.SyncAlways || cfg.memLimit != 512<<20 {
		t.Errorf("the example's live settings: listen %q, fsync %v, memory limit %d", cfg.listen, cfg.node.Fsync, cfg.memLimit)
	}

	f, err := os.Open(example)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var live map[string]any
	if _, err := toml.DecodeFile(example, &live); err != nil {
		t.Fatal(err)
	}
	settings := map[string]any{}
	for k, v := range live {
		settings[k] = v
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := commentedSetting.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var one map[string]any
		if _, err := toml.Decode(m[1]+" = "+m[2], &one); err != nil {
			t.Errorf("commented setting %q is not TOML: %v", sc.Text(), err)
			continue
		}
		settings[m[1]] = one[m[1]]
	}
	for _, fl := range serveFlags() {
		name := fl.Names()[0]
		if name == "config" {
			continue
		}
		v, ok := settings[name]
		if !ok {
			t.Errorf("the example lacks %s", name)
			continue
		}
		var fits bool
		switch fl.(type) {
		case *altsrc.BoolFlag:
			_, fits = v.(bool)
		case *altsrc.IntFlag:
			_, fits = v.(int64)
		case *altsrc.StringSliceFlag:
			_, fits = v.([]any)
		default:
			_, fits = v.(string)
		}
		if !fits {
			t.Errorf("the example's %s = %v (%T) is not of the type --%s takes", name, v, v, name)
		}
	}
	for k := range settings {
		if !slices.ContainsFunc(serveFlags(), func(f cli.Flag) bool { return f.Names()[0] == k }) {
			t.Errorf("the example sets %s, which is no serve flag", k)
		}
	}
}
