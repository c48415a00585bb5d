package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var systemdUnitFile = filepath.Join(repoRoot, "deploy", "systemd", "bunbox-relay.service")

// unitEntries reads a systemd unit file: section -> key -> values (a key may repeat).
func unitEntries(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			require.True(t, ok && section != "", "line %d: %q", i+1, l)
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// TestSystemdUnit checks deploy/systemd/bunbox-relay.service: `bunbox relay` with flags the command has,
// its settings from an EnvironmentFile (no secret in the unit), a user of its own, Restart=on-failure, the
// hardening options, and `systemd-analyze verify` where systemd is installed.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(systemdUnitFile)
	require.NoError(t, err)
	u := unitEntries(t, string(raw))
	svc := u["Service"]
	require.NotNil(t, svc, "a [Service] section")
	require.Equal(t, []string{"multi-user.target"}, u["Install"]["WantedBy"])

	exec0 := strings.Fields(svc["ExecStart"][0])
	require.Len(t, svc["ExecStart"], 1)
	require.Equal(t, "/usr/local/bin/bunbox", exec0[0], "where docs/deploy.md installs the binary")
	require.Equal(t, "relay", exec0[1])
	requireFlagsParse(t, exec0[1:])

	require.Len(t, svc["EnvironmentFile"], 1, "the settings, and the connection strings, come from a file")
	require.NotContains(t, svc["EnvironmentFile"][0], "-", "a missing file is an error, not an empty environment")
	for _, e := range svc["Environment"] {
		require.NotRegexp(t, secretName, e, "a secret goes in the EnvironmentFile, not the unit")
	}
	require.Equal(t, []string{"on-failure"}, svc["Restart"])
	switch {
	case len(svc["DynamicUser"]) > 0:
		require.Equal(t, []string{"yes"}, svc["DynamicUser"])
	default:
		require.NotEmpty(t, svc["User"], "DynamicUser=yes or a User of its own")
		require.NotContains(t, []string{"root", "0"}, svc["User"][0])
	}
	for k, v := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes",
		"MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
	} {
		require.Equal(t, []string{v}, svc[k], "Service %s", k)
	}
	require.Contains(t, svc["RestrictAddressFamilies"][0], "AF_INET", "the relay dials PostgreSQL and Redis")

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found: the unit is checked by structure only")
	}
	// verify wants ExecStart's binary to exist: point it at an executable of this machine.
	self, err := os.Executable()
	require.NoError(t, err)
	unit := filepath.Join(t.TempDir(), filepath.Base(systemdUnitFile))
	require.NoError(t, os.WriteFile(unit, []byte(strings.Replace(string(raw), "ExecStart=/usr/local/bin/bunbox", "ExecStart="+self, 1)), 0o644))
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify:\n%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")
}
