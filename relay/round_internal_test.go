package relay

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Redis Cluster's topology errors are outages, released untouched, not the fault of the row.
func TestUnavailableClusterErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		msg  string
		want bool
	}{
		{"UNKNOWN: redis eval error: MOVED 14398 127.0.0.1:34699", true},
		{"UNKNOWN: redis eval error: ASK 14398 127.0.0.1:34699", true},
		{"UNKNOWN: redis eval error: TRYAGAIN Multiple keys request during rehashing of slot", true},
		{"UNKNOWN: redis eval error: CLUSTERDOWN The cluster is down", true},
		{"UNKNOWN: redis eval error: ERR wrong number of arguments", true},
		{"bunbox: TASK payload refused", true},
	} {
		require.Equal(t, tt.want, !taskOwn(errors.New(tt.msg)), tt.msg)
	}
}
