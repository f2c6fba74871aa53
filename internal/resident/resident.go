// Package resident measures how much of the files a process has mapped is
// in its resident set, for the tests that check a log or the catalog drops
// the pages it is done with (Linux only: it reads /proc/self/smaps).
package resident

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// MappedKiB sums the Rss of this process's mappings of the files whose
// path match accepts, from /proc/self/smaps.
func MappedKiB(match func(path string) bool) (int64, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var kib int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			// A mapping's first line; anonymous mappings name no file.
			in = len(fields) >= 6 && match(fields[5])
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			n, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, err
			}
			kib += n
		}
	}
	return kib, sc.Err()
}
