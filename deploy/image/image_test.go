package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// binary is a static platformd built once by TestMain, as `make image`
// builds it but for -trimpath: without it the build shares its compile
// with the suite's other static builds (the tests check what the image
// holds, not the binary's file paths).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "platformd-image")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "platformd")
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", binary, "./cmd/platformd")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("go build: %v\n%s", err, out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// files reads every layer's tar into path -> header and content.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			p := "/" + strings.TrimSuffix(path.Clean(h.Name), "/")
			hdrs[p] = h
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(tr)
				require.NoError(t, err)
				data[p] = b
			}
		}
		require.NoError(t, rc.Close())
	}
	return hdrs, data
}

// TestImage builds the image as `make image` does, reads it back from the
// OCI layout and checks what the issue asks of it.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	img, err := Build(Options{Binary: binary})
	require.NoError(t, err)
	layoutDir, tarPath := filepath.Join(dir, "oci"), filepath.Join(dir, "platformd.tar")
	require.NoError(t, run(Options{Binary: binary}, layoutDir, tarPath, "platformd:test"))

	// The layout holds exactly this image, tagged.
	p, err := layout.FromPath(layoutDir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	require.Equal(t, "platformd:test", im.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	want, err := img.Digest()
	require.NoError(t, err)
	require.Equal(t, want, im.Manifests[0].Digest, "same inputs, same digest")
	got, err := idx.Image(im.Manifests[0].Digest)
	require.NoError(t, err)

	// OCI media types, two layers: base (passwd, certs, tzdata), binary.
	mt, err := got.MediaType()
	require.NoError(t, err)
	require.Equal(t, types.OCIManifestSchema1, mt)
	m, err := got.Manifest()
	require.NoError(t, err)
	require.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 2)
	for _, l := range m.Layers {
		require.Equal(t, types.OCILayer, l.MediaType)
	}

	// Config: entry point, command, non-root user, environment.
	cf, err := got.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, []string{"/usr/bin/platformd"}, cf.Config.Entrypoint)
	require.Equal(t, []string{"run", "-config", "/etc/platformd/platformd.yaml"}, cf.Config.Cmd)
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	require.True(t, ok, "user %q is uid:gid", cf.Config.User)
	for _, id := range []string{uid, gid} {
		n, err := strconv.Atoi(id)
		require.NoError(t, err, "numeric ids, so that Kubernetes runAsNonRoot can check them")
		require.NotZero(t, n, "non-root")
	}
	require.Contains(t, cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	require.Contains(t, cf.Config.Env, "ZONEINFO=/usr/share/zoneinfo")
	require.Equal(t, time.Unix(0, 0).UTC(), cf.Created.UTC(), "reproducible timestamp")

	hdrs, data := files(t, got)
	// No shell, nor anything else to exec but the daemon.
	for p, h := range hdrs {
		base := path.Base(p)
		require.NotContains(t, []string{"sh", "bash", "dash", "busybox", "ash"}, base, "shell in image: %s", p)
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			require.Equal(t, "/usr/bin/platformd", p, "executable other than the daemon")
		}
		require.Zero(t, h.Uid, "%s owned by root (not writable by the user)", p)
	}
	require.NotContains(t, hdrs, "/bin")
	// The non-root user exists.
	require.Contains(t, string(data["/etc/passwd"]), fmt.Sprintf("nonroot:x:%s:%s:", uid, gid))
	// CA certificates and tzdata from the build machine's Debian packages.
	require.Contains(t, string(data["/etc/ssl/certs/ca-certificates.crt"]), "BEGIN CERTIFICATE")
	paris, ok := data["/usr/share/zoneinfo/Europe/Paris"]
	require.True(t, ok, "tzdata present")
	_, err = time.LoadLocationFromTZData("Europe/Paris", paris)
	require.NoError(t, err)
	// The binary is static: no ELF interpreter, built with CGO_ENABLED=0.
	bin := data["/usr/bin/platformd"]
	f, err := elf.NewFile(bytes.NewReader(bin))
	require.NoError(t, err)
	for _, prog := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, prog.Type, "dynamically linked binary")
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	require.NoError(t, err)
	cgo := ""
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			cgo = s.Value
		}
	}
	require.Equal(t, "0", cgo)

	// The daemon from the image validates the shop's config with SQL
	// handlers; it has no Go handler, so the Go shop's config (whose
	// daemon is examples/shop/cmd/shopd) names unknown handlers.
	extracted := filepath.Join(dir, "platformd")
	require.NoError(t, os.WriteFile(extracted, bin, 0o755))
	out, err := exec.Command(extracted, "check", "-config", "../../examples/shop-sql/platformd.yaml").CombinedOutput()
	require.NoError(t, err, "platformd check:\n%s", out)
	out, err = exec.Command(extracted, "check", "-config", "../../examples/shop/platformd.yaml").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `unknown handler "stock.reserve"`)

	// The docker-archive tarball holds the same config (podman/docker load).
	ti, err := tarball.ImageFromPath(tarPath, nil)
	require.NoError(t, err)
	wantCfg, err := img.ConfigName()
	require.NoError(t, err)
	gotCfg, err := ti.ConfigName()
	require.NoError(t, err)
	require.Equal(t, wantCfg, gotCfg)
}

// TestImageNeedsItsInputs: a missing CA bundle is an error naming the
// Debian package, never an image without certificates.
func TestImageNeedsItsInputs(t *testing.T) {
	_, err := Build(Options{Binary: binary, CACerts: filepath.Join(t.TempDir(), "none.crt")})
	require.ErrorContains(t, err, "ca-certificates")
	require.Error(t, run(Options{}, "x", "", "platformd:test"))
}
