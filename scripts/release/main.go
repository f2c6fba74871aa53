// Command release builds Hourglass's release artefacts (package
// internal/release): static binaries for linux and darwin on amd64 and
// arm64, their SHA-256 sums, and the container image of the linux ones as
// `docker load` tarballs and an OCI layout, with no container daemon.
//
//	go run ./scripts/release --out dist --version v1.2.0
//	go run ./scripts/release --out dist --platforms linux/amd64   # what CI builds
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/internal/release"
)

func main() {
	out := flag.String("out", "dist", "directory to write the artefacts to")
	version := flag.String("version", "", "version stamped into the binaries and the image (default: what Go stamps from the checkout, or devel)")
	platforms := flag.String("platforms", "", "comma-separated OS/ARCH list (default linux/amd64,linux/arm64,darwin/amd64,darwin/arm64)")
	caCerts := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle (PEM) to put into the image; '' for none")
	source := flag.String("source", release.DefaultSource, "the image's org.opencontainers.image.source label")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("release takes no arguments, got %q (see --help)", flag.Args()))
	}
	o := release.Options{Out: *out, Version: *version, CACerts: *caCerts, Source: *source, Log: os.Stderr}
	if *platforms != "" {
		for _, s := range strings.Split(*platforms, ",") {
			p, err := release.ParsePlatform(strings.TrimSpace(s))
			if err != nil {
				fail(err)
			}
			o.Platforms = append(o.Platforms, p)
		}
	}
	// SOURCE_DATE_EPOCH (reproducible builds) dates the image; else the epoch.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s))
		}
		o.Created = time.Unix(n, 0).UTC()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := release.Build(ctx, o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("version %s, revision %s\n", res.Version, res.Revision)
	var paths []string
	for _, p := range res.Binaries {
		paths = append(paths, p)
	}
	for _, p := range res.Images {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range append(paths, res.Layout, res.Sums) {
		if p != "" {
			fmt.Println(p)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
