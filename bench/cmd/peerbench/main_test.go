package main

import (
	"os/exec"
	"strings"
	"testing"
)

func TestShellJoinRoundTrips(t *testing.T) {
	args := []string{"--scale", "0.05", "--note", "engineers' sessions ran; load 3", ""}
	line := shellJoin(args)
	if !strings.HasPrefix(line, "--scale 0.05 --note '") {
		t.Fatalf("shellJoin = %q: plain words must stay unquoted", line)
	}
	// The shell must read back exactly the arguments.
	got, err := exec.Command("sh", "-c", "for a in "+line+"; do printf '[%s]\\n' \"$a\"; done").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, a := range args {
		want += "[" + a + "]\n"
	}
	if string(got) != want {
		t.Fatalf("the shell read\n%s\nwant\n%s", got, want)
	}
}

func TestSplitList(t *testing.T) {
	got := strings.Join(splitList(" w1, W3 ,,nats"), "|")
	if got != "W1|W3|NATS" {
		t.Fatalf("splitList = %q", got)
	}
}
