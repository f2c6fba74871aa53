// Package tdmanifest is the format of testdata/manifest.json: what the
// generator (internal/inspect, `go generate ./internal/inspect`) put in the
// testdata directories, which the recovery tests of several packages use as
// their oracle. (A directory named testdata cannot hold a Go package.)
package tdmanifest

import (
	"encoding/json"
	"os"
	"time"
)

// Path is the manifest's path from a package directory of the module.
const Path = "../testdata/manifest.json"

// Manifest is testdata/manifest.json.
type Manifest struct {
	Now      time.Time         `json:"now"`
	Messages []Message         `json:"messages"`
	Damage   map[string]Damage `json:"damage"` // by directory name
}

// Message is one message the generator scheduled.
type Message struct {
	ID     string `json:"id"`
	Topic  string `json:"topic"`
	Bucket string `json:"bucket"` // its segment's file name
	Body   []byte `json:"body"`
	State  string `json:"state"` // pending, delivered, cancelled
}

// Damage says which file of a damaged directory was changed, at what byte
// offset, and what was done there.
type Damage struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	What   string `json:"what"`
	// ID is the message whose entry was damaged, if one was.
	ID string `json:"id,omitempty"`
	// Also lists further damaged files, if any.
	Also []Damage `json:"also,omitempty"`
}

// Load reads the manifest at path.
func Load(path string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(b, &m)
	return m, err
}
