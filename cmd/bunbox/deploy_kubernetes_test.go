package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

var kubernetesFile = filepath.Join(repoRoot, "deploy", "kubernetes", "relay.yaml")

// The parts of a Deployment that TestKubernetesDeployment checks; yaml.v3 refuses unknown fields, so a
// typo in a key fails the test instead of being dropped by the API server's pruning unseen.
type (
	k8sDeployment struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   k8sMeta
		Spec       struct {
			Replicas int
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			}
			Template struct {
				Metadata k8sMeta
				Spec     struct {
					AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
					TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
					SecurityContext               struct {
						RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
						RunAsUser      int   `yaml:"runAsUser"`
						RunAsGroup     int   `yaml:"runAsGroup"`
						SeccompProfile struct {
							Type string
						} `yaml:"seccompProfile"`
					} `yaml:"securityContext"`
					Containers []k8sContainer
				}
			}
		}
	}
	k8sMeta struct {
		Name        string
		Labels      map[string]string
		Annotations map[string]string
	}
	k8sContainer struct {
		Name  string
		Image string
		Args  []string
		Ports []struct {
			Name          string
			ContainerPort int `yaml:"containerPort"`
			Protocol      string
		}
		Env []struct {
			Name      string
			Value     *string
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name, Key string
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		}
		LivenessProbe   k8sProbe `yaml:"livenessProbe"`
		ReadinessProbe  k8sProbe `yaml:"readinessProbe"`
		Resources       struct{ Requests, Limits map[string]string }
		SecurityContext struct {
			RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			Capabilities             struct{ Drop []string }
		} `yaml:"securityContext"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string
			Port any
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		TimeoutSeconds   int `yaml:"timeoutSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
)

// cliEnv returns the variables the CLI reads for a command line (through run's getenv).
func cliEnv(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	var out bytes.Buffer
	run(context.Background(), args, func(k string) string { read[k] = true; return "" }, &out, &out)
	return read
}

// requireRelayReads fails unless `bunbox relay` reads the relay setting name: it refuses the command when
// the variable holds a value of the wrong kind, naming it.
func requireRelayReads(t *testing.T, name string) {
	t.Helper()
	const bad = "not-a-setting"
	t.Setenv(name, bad)
	var out bytes.Buffer
	code := run(context.Background(), []string{"relay", "-metrics-addr", ""}, func(k string) string {
		if k == name {
			return bad
		}
		return ""
	}, &out, &out)
	require.NotZero(t, code)
	require.Contains(t, out.String(), name, "bunbox relay does not read %s", name)
}

// TestKubernetesDeployment checks deploy/kubernetes/relay.yaml: a Deployment of the image's `bunbox
// relay` whose flags the command has, probes on the relay's /healthz and /readyz at the port it listens
// on, the connection strings from a Secret under the names the CLI reads, the relay settings under names
// the relay reads, resources, and a non-root, read-only, unprivileged container matching the image's user.
func TestKubernetesDeployment(t *testing.T) { // not parallel: requireRelayReads sets the environment
	raw, err := os.ReadFile(kubernetesFile)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var d k8sDeployment
	require.NoError(t, dec.Decode(&d))
	require.Equal(t, "apps/v1", d.APIVersion)
	require.Equal(t, "Deployment", d.Kind)
	require.NotEmpty(t, d.Spec.Selector.MatchLabels)
	for k, v := range d.Spec.Selector.MatchLabels {
		require.Equal(t, v, d.Spec.Template.Metadata.Labels[k], "the selector selects the pods' label %s", k)
	}
	pod := d.Spec.Template.Spec
	require.Positive(t, pod.TerminationGracePeriodSeconds)
	require.NotNil(t, pod.AutomountServiceAccountToken)
	require.False(t, *pod.AutomountServiceAccountToken, "the relay calls no Kubernetes API")
	require.True(t, pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot)
	require.Equal(t, nonrootUID, pod.SecurityContext.RunAsUser, "the image's USER")
	require.Equal(t, "RuntimeDefault", pod.SecurityContext.SeccompProfile.Type)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	// The command: bunbox relay, flags the command has, probes on every interface at the declared port.
	require.Equal(t, "relay", c.Args[0], "the image's ENTRYPOINT is bunbox")
	requireFlagsParse(t, c.Args)
	require.Len(t, c.Ports, 1)
	port := c.Ports[0]
	requireAllInterfaces(t, c.Args, strconv.Itoa(port.ContainerPort))
	require.Equal(t, strconv.Itoa(port.ContainerPort), d.Spec.Template.Metadata.Annotations["prometheus.io/port"])
	relaySrc, err := os.ReadFile("relay.go")
	require.NoError(t, err)
	for probe, want := range map[string]k8sProbe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		require.NotNil(t, want.HTTPGet, "the %s probe is an HTTP GET", probe)
		require.Equal(t, probe, want.HTTPGet.Path)
		require.Contains(t, []any{port.Name, port.ContainerPort}, want.HTTPGet.Port, "the %s probe's port", probe)
		require.Contains(t, string(relaySrc), `mux.Handle("GET `+probe+`"`, "bunbox relay serves %s", probe)
		require.Positive(t, want.TimeoutSeconds)
	}
	require.Contains(t, string(relaySrc), `mux.Handle("GET `+d.Spec.Template.Metadata.Annotations["prometheus.io/path"]+`"`)

	// The environment: connection strings from the Secret, under the names the CLI reads; nothing secret
	// in plain values; relay settings the relay reads.
	read := cliEnv(t, "relay", "-h")
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			require.True(t, read[e.Name], "bunbox relay does not read %s", e.Name)
			require.NotEmpty(t, e.ValueFrom.SecretKeyRef.Name)
			fromSecret[e.Name] = true
		case strings.HasPrefix(e.Name, "OUTBOX_") && !read[e.Name]:
			require.NotNil(t, e.Value)
			requireRelayReads(t, e.Name)
		default:
			require.True(t, read[e.Name], "bunbox relay does not read %s", e.Name)
		}
		if e.Value != nil {
			require.NotRegexp(t, secretName, e.Name, "%s comes from a Secret, not a plain value", e.Name)
			require.NotRegexp(t, regexp.MustCompile(`://[^/\s]*@`), *e.Value)
		}
	}
	require.Equal(t, map[string]bool{"DATABASE_URL": true, "REDIS_URL": true}, fromSecret)

	// Resources and the container's security context.
	require.NotEmpty(t, c.Resources.Requests["cpu"])
	require.NotEmpty(t, c.Resources.Requests["memory"])
	require.NotEmpty(t, c.Resources.Limits["memory"])
	sc := c.SecurityContext
	require.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
	require.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem)
	require.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation)
	require.Equal(t, []string{"ALL"}, sc.Capabilities.Drop)
}
