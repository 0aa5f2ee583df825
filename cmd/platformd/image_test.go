package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// TestImageRunsUnderPodman builds the image as `make image` does, runs it
// with podman against the local PostgreSQL and RabbitMQ, and sees it serve
// grpc.health.v1 and process messages (through SQL handlers: the image
// holds the release binary, which has no Go handler). It needs a machine
// that can run containers: without podman, or when podman cannot start a
// container (no usable OCI runtime or cgroups, as in some sandboxes), it
// skips and says why. scripts/services.sh does not install podman; the image itself
// is checked everywhere by deploy/image's tests.
func TestImageRunsUnderPodman(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman not installed (apt-get install podman runc to run this test): the image's contents are checked by deploy/image's tests")
	}
	if testing.Short() {
		t.Skip("-short: building and running the image takes a while")
	}
	e := newEnv(t)
	dir := t.TempDir()
	tag := "localhost/platformd-test:" + e.suffix

	// The image, as make image builds it.
	bin := filepath.Join(dir, "platformd")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	tarPath := filepath.Join(dir, "platformd.tar")
	mk := exec.Command("go", "run", ".", "-binary", bin, "-tarball", tarPath, "-tag", tag)
	mk.Dir = "../../deploy/image"
	out, err = mk.CombinedOutput()
	require.NoError(t, err, "deploy/image:\n%s", out)
	out, err = exec.Command(podman, "load", "-i", tarPath).CombinedOutput()
	if err != nil {
		t.Skipf("podman cannot load images on this machine (%v): %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command(podman, "rmi", "-f", tag).Run() })

	// The config, readable by the image's non-root user: the shop as SQL
	// handlers, since the release binary in the image has no Go handler.
	// Its migrations folders are absolute paths of this checkout, mounted
	// at the same place.
	cfg := e.sqlConfig(t)
	raw, err := os.ReadFile(cfg)
	require.NoError(t, err)
	mounted := filepath.Join(dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(mounted, raw, 0o644))
	require.NoError(t, os.Chmod(mounted, 0o644))
	migrations, err := filepath.Abs(filepath.Join("..", "..", "internal", "fixture", "shop", "migrations"))
	require.NoError(t, err)

	name := "platformd-test-" + e.suffix
	args := []string{}
	// Debian's crun fails on hybrid cgroup hierarchies; runc copes.
	if runc, err := exec.LookPath("runc"); err == nil {
		args = append(args, "--runtime", runc)
	}
	// podman's default limits can exceed what an unprivileged container
	// host allows: ask for the limits this process has.
	var nofile syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile))
	args = append(args, "run", "-d", "--name", name, "--network", "host",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", "nproc=4096:4096",
		"-v", mounted+":/etc/platformd/platformd.yaml:ro", "-v", migrations+":"+migrations+":ro", tag)
	out, err = exec.Command(podman, args...).CombinedOutput()
	if err != nil {
		t.Skipf("podman cannot run a container on this machine (%v): %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "-t", "5", name).Run() })
	logs := func() string {
		o, _ := exec.Command(podman, "logs", name).CombinedOutput()
		return string(o)
	}

	// Health: the daemon in the container serves grpc.health.v1.
	conn, err := grpc.NewClient(e.adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	health := healthpb.NewHealthClient(conn)
	require.Eventually(t, func() bool {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 60*time.Second, 100*time.Millisecond, "no SERVING health from the container:\n%s", logs)
	cli, ctx := adminClient(t, e.adminAddr, adminToken)
	require.Eventually(t, func() bool {
		r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{})
		if err != nil || len(r.GetPools()) != 2 {
			return false
		}
		for _, p := range r.GetPools() {
			if p.GetState() != adminv1.PoolState_POOL_STATE_RUNNING {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "pools did not start in the container:\n%s", logs)

	// A message goes through: the reservations are committed.
	sent := e.publishOrders(t, 5, 0)
	require.Eventually(t, func() bool {
		return count(t, e.stockDSN, "SELECT count(*) FROM reservation") == sent
	}, 60*time.Second, 100*time.Millisecond, "the container did not process the orders:\n%s", logs)
}
