package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/hourglassmq/hourglass/internal/backup"
)

// BackupPath is where the server takes a backup of its data directory:
// POST a JSON {"to": "/absolute/new/dir"} (hourglass backup does).
const BackupPath = "/v1/backup"

// backupRequest is the body of a POST to BackupPath.
type backupRequest struct {
	To string `json:"to"`
}

// backupAnswer is the answer to a backup that was taken.
type backupAnswer struct {
	To     string `json:"to"`
	Linked int    `json:"linked"`
	Copied int    `json:"copied"`
	Bytes  int64  `json:"bytes"`
	Took   string `json:"took"`
}

// serveBackup takes a backup (internal/backup) into the directory the
// request names, on this server's file system.
func (s *Server) serveBackup(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		w.Write([]byte(msg + "\n"))
	}
	if s.opts.Cluster != nil || s.opts.Engine == nil || s.opts.DataDir == "" {
		fail(http.StatusNotImplemented, "backup: this server keeps no data directory of its own (cluster mode keeps its state in JetStream)")
		return
	}
	if why := s.notReady(); why != "" {
		fail(http.StatusServiceUnavailable, "backup: not ready: "+why)
		return
	}
	var req backupRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.To == "" || !filepath.IsAbs(req.To) {
		fail(http.StatusBadRequest, `backup: want a JSON body {"to": "/absolute/path"} naming a new directory on the server's file system`)
		return
	}
	if !s.changes.backingUp.CompareAndSwap(false, true) {
		fail(http.StatusConflict, "backup: another backup is running; try again when it is done")
		return
	}
	defer s.changes.backingUp.Store(false)
	rep, err := backup.Take(backup.Options{DataDir: s.opts.DataDir, To: filepath.Clean(req.To), CopyCatalog: s.opts.Engine.CopyCatalog,
		WaitDelivered: func() error { return s.opts.Engine.WaitDelivered(r.Context()) }})
	switch {
	case errors.Is(err, backup.ErrExists):
		fail(http.StatusConflict, "backup: "+req.To+" exists; name a new directory")
		return
	case errors.Is(err, backup.ErrCrossDevice):
		fail(http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.log.Error("backup failed", "to", req.To, "err", err)
		// The data directory's path stays on the server.
		fail(http.StatusInternalServerError, strings.ReplaceAll(err.Error(), s.opts.DataDir, "DATA_DIR"))
		return
	}
	s.log.Info("backup taken", "to", req.To, "linked", rep.Linked, "copied", rep.Copied, "bytes", rep.Bytes, "took", rep.Took)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(backupAnswer{To: req.To, Linked: rep.Linked, Copied: rep.Copied, Bytes: rep.Bytes, Took: rep.Took.String()})
}
