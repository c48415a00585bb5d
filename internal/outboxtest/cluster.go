package outboxtest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisCluster is a private Redis Cluster of three masters (no replicas) on loopback ports, each a
// redis-server in cluster mode with its own data directory. A node keeps its port, its data (with the
// append-only file on) and its slots (nodes.conf) across Stop and Start.
//
//	c := outboxtest.StartRedisCluster(t, nil)
//	opt := asynq.RedisClusterClientOpt{Addrs: c.Addrs()}
//	c.Nodes[1].Stop(t); ...; c.Nodes[1].Start(t); c.WaitOK(t) // one node restarted
//
// The cluster runs with cluster-require-full-coverage off: while a node is down the others keep serving
// their slots.
type RedisCluster struct {
	Nodes []*Redis
}

// StartRedisCluster starts three redis-server nodes in cluster mode, joins them with
// `redis-cli --cluster create` (the 16384 slots split in three) and waits until every node reports
// cluster_state:ok. opts applies to every node; nil means the defaults. A Password is not supported
// here.
func StartRedisCluster(tb testing.TB, opts *RedisOptions) *RedisCluster {
	tb.Helper()
	SkipShort(tb)
	SkipPooled(tb, "the Redis Cluster scenarios do not depend on how PostgreSQL is reached: the direct pass runs them")
	if opts != nil && opts.Password != "" {
		tb.Fatal("outboxtest.StartRedisCluster: RedisOptions.Password is not supported for a cluster")
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("%s not found (%v): scripts/devservices.sh up installs it", bin, err)
		}
	}
	c := &RedisCluster{}
	for range 3 {
		dir, err := os.MkdirTemp("", "bunbox-redis-cluster-")
		if err != nil {
			tb.Fatalf("redis dir: %v", err)
		}
		r := &Redis{dir: dir, port: clusterPort(tb), extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "no"}}
		if opts != nil {
			r.opts = *opts
		}
		tb.Cleanup(func() {
			r.kill()
			_ = os.RemoveAll(dir)
		})
		r.Start(tb)
		c.Nodes = append(c.Nodes, r)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(tb)
	return c
}

// Addrs are the nodes' host:port addresses, the seed list of a cluster client.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// WaitOK waits until every node reports cluster_state:ok with all 16384 slots served, e.g. after a node
// was started again.
func (c *RedisCluster) WaitOK(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var bad []string
		for _, n := range c.Nodes {
			if info := n.Cmd(tb, "cluster", "info"); !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_ok:16384") {
				bad = append(bad, n.Addr())
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis cluster: nodes %v not ok within 60s", bad)
		}
		time.Sleep(50 * time.Millisecond) // a poll step while the nodes agree
	}
}

// NodeOf returns the index in Nodes of the node serving key's hash slot.
func (c *RedisCluster) NodeOf(tb testing.TB, key string) int {
	tb.Helper()
	slot := c.Nodes[0].Cmd(tb, "cluster", "keyslot", key)
	for i, n := range c.Nodes {
		if n.owns(tb, slot) {
			return i
		}
	}
	tb.Fatalf("redis cluster: no node serves slot %s of %q", slot, key)
	return -1
}

// owns reports whether the node serves slot, from its own line of CLUSTER NODES.
func (r *Redis) owns(tb testing.TB, slot string) bool {
	tb.Helper()
	s, err := strconv.Atoi(slot)
	if err != nil {
		tb.Fatalf("slot %q: %v", slot, err)
	}
	for _, line := range strings.Split(r.Cmd(tb, "cluster", "nodes"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, rg := range f[8:] {
			lo, hi, isRange := strings.Cut(rg, "-") // "0-5460", or a single slot "5461"
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= s && s <= b {
				return true
			}
		}
	}
	return false
}

// Cmd runs a command on this server with redis-cli (no redirection) and returns its output, trimmed.
func (r *Redis) Cmd(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(r.port)}, args...)...).
		CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli %v on %s: %v\n%s", args, r.Addr(), err, out)
	}
	return strings.TrimSpace(string(out))
}

// clusterPort returns a free loopback port whose cluster bus port (port+10000) is free too.
func clusterPort(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		p := freePort(tb)
		if p+10000 > 65535 {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000))); err == nil {
			_ = l.Close()
			return p
		}
	}
	tb.Fatal("no free port pair for a cluster node")
	return 0
}

// MigrateSlot moves the hash slot of key, with its keys, from the node serving it to Nodes[to], the way
// `redis-cli --cluster reshard` does: the slot is marked importing and migrating, its keys move in
// batches (meanwhile the source answers ASK for keys it no longer has, and TRYAGAIN to commands whose keys
// are split), then every node is told the new owner. Clients that cached the old owner get MOVED.
func (c *RedisCluster) MigrateSlot(tb testing.TB, key string, to int) {
	tb.Helper()
	from := c.NodeOf(tb, key)
	if from == to {
		return
	}
	src, dst := c.Nodes[from], c.Nodes[to]
	slot := src.Cmd(tb, "cluster", "keyslot", key)
	srcID, dstID := src.Cmd(tb, "cluster", "myid"), dst.Cmd(tb, "cluster", "myid")
	dst.mustOK(tb, "cluster", "setslot", slot, "importing", srcID)
	src.mustOK(tb, "cluster", "setslot", slot, "migrating", dstID)
	for {
		keys := strings.Fields(src.Cmd(tb, "cluster", "getkeysinslot", slot, "100"))
		if len(keys) == 0 {
			break
		}
		args := append([]string{"migrate", "127.0.0.1", strconv.Itoa(dst.port), "", "0", "5000", "keys"}, keys...)
		if out := src.Cmd(tb, args...); out != "OK" && out != "NOKEY" { // NOKEY: gone meanwhile
			tb.Fatalf("redis-cli migrate on %s: %s", src.Addr(), out)
		}
	}
	for _, n := range append([]*Redis{dst, src}, c.Nodes...) {
		n.mustOK(tb, "cluster", "setslot", slot, "node", dstID)
	}
	c.WaitOK(tb)
}

func (r *Redis) mustOK(tb testing.TB, args ...string) {
	tb.Helper()
	if out := r.Cmd(tb, args...); out != "OK" {
		tb.Fatalf("redis-cli %v on %s: %s", args, r.Addr(), out)
	}
}
