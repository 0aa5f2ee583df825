// Command image assembles platformd's container image without a Docker
// daemon or a registry: an empty base ("FROM scratch"), a base layer with
// the build machine's CA certificates (Debian's ca-certificates), its
// tzdata and a passwd/group naming the non-root user, and an application
// layer with a static platformd binary. It writes an OCI image layout
// (for skopeo, crane, containerd's ctr import, Kubernetes image tooling)
// and a docker-archive tarball (`podman load`, `docker load`).
//
// It is a program of its own over go-containerregistry's mutate, tarball
// and layout packages rather than crane's command line: crane has no verb
// to start from an empty image and set user, entrypoint and environment
// offline in one go, and a program keeps the image reproducible (fixed
// timestamps, sorted entries, one digest per input).
//
// Usage (make image does this):
//
//	CGO_ENABLED=0 go build -trimpath -o bin/image/platformd ./cmd/platformd
//	cd deploy/image && go run . -binary ../../bin/image/platformd \
//	    -layout ../../bin/image/oci -tarball ../../bin/image/platformd.tar
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts (docs/deploying.md and the Helm chart rely on
// them).
const (
	// BinaryPath is where the daemon lives in the image.
	BinaryPath = "/usr/bin/platformd"
	// ConfigPath is the config file the default command reads; mount it.
	ConfigPath = "/etc/platformd/platformd.yaml"
	// UID and GID are the non-root user's ids (distroless' "nonroot").
	UID = 65532
	// GID is the non-root user's group id.
	GID = 65532
	// CACertsPath is Debian's CA bundle path, also the image's.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// ZoneinfoPath is Debian's tzdata path, also the image's.
	ZoneinfoPath = "/usr/share/zoneinfo"
)

// Options says what to build from.
type Options struct {
	// Binary is a static (CGO_ENABLED=0) platformd for linux.
	Binary string
	// CACerts is the CA bundle to copy (default CACertsPath).
	CACerts string
	// Zoneinfo is the tzdata tree to copy (default ZoneinfoPath).
	Zoneinfo string
	// Arch is the image's architecture (default runtime.GOARCH).
	Arch string
	// Created is every timestamp in the image (default the Unix epoch), so
	// that the same inputs give the same digest.
	Created time.Time
	// Version goes into the org.opencontainers.image.version label.
	Version string
}

func main() {
	var o Options
	var layoutDir, tarPath, tag string
	flag.StringVar(&o.Binary, "binary", "", "static platformd binary (CGO_ENABLED=0, GOOS=linux)")
	flag.StringVar(&o.CACerts, "cacerts", CACertsPath, "CA bundle (Debian's ca-certificates)")
	flag.StringVar(&o.Zoneinfo, "zoneinfo", ZoneinfoPath, "tzdata tree (Debian's tzdata)")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "image architecture (the binary's GOARCH)")
	flag.StringVar(&o.Version, "version", "dev", "image version label")
	flag.StringVar(&layoutDir, "layout", "", "write an OCI image layout to this directory (replaced)")
	flag.StringVar(&tarPath, "tarball", "", "write a docker-archive tarball (podman/docker load) to this file")
	flag.StringVar(&tag, "tag", "platformd:dev", "tag recorded in the layout and the tarball")
	flag.Parse()
	if err := run(o, layoutDir, tarPath, tag); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, layoutDir, tarPath, tag string) error {
	if o.Binary == "" || (layoutDir == "" && tarPath == "") {
		return errors.New("need -binary and at least one of -layout, -tarball")
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	if layoutDir != "" {
		if err := WriteLayout(layoutDir, img, tag); err != nil {
			return err
		}
	}
	if tarPath != "" {
		ref, err := name.NewTag(tag)
		if err != nil {
			return fmt.Errorf("error parsing tag %q: %w", tag, err)
		}
		if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
			return fmt.Errorf("error writing tarball %s: %w", tarPath, err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("error computing digest: %w", err)
	}
	fmt.Printf("image %s %s\n", tag, d)
	return nil
}

// WriteLayout writes img as the only image of a fresh OCI layout at dir.
func WriteLayout(dir string, img v1.Image, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("error clearing %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("error creating layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return fmt.Errorf("error writing image to layout %s: %w", dir, err)
	}
	return nil
}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	o.CACerts = cmpOr(o.CACerts, CACertsPath)
	o.Zoneinfo = cmpOr(o.Zoneinfo, ZoneinfoPath)
	o.Arch = cmpOr(o.Arch, runtime.GOARCH)
	o.Version = cmpOr(o.Version, "dev")
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}

	base := newLayer(o.Created)
	base.dir("etc", 0o755)
	base.file("etc/passwd", 0o644, fmt.Appendf(nil,
		"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:platformd:/nonexistent:/sbin/nologin\n", UID, GID))
	base.file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", GID))
	base.dir("etc/platformd", 0o755)
	base.dir("etc/ssl", 0o755)
	base.dir("etc/ssl/certs", 0o755)
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("error reading CA certificates (install Debian's ca-certificates): %w", err)
	}
	base.file(strings.TrimPrefix(CACertsPath, "/"), 0o644, certs)
	base.dir("tmp", 0o1777)
	base.dir("usr", 0o755)
	base.dir("usr/bin", 0o755)
	base.dir("usr/share", 0o755)
	if err := base.tree(o.Zoneinfo, strings.TrimPrefix(ZoneinfoPath, "/")); err != nil {
		return nil, fmt.Errorf("error adding tzdata (install Debian's tzdata): %w", err)
	}

	app := newLayer(o.Created)
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("error reading binary: %w", err)
	}
	app.file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin)

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		l  *layerBuilder
		by string
	}{{base, "platformd base: passwd, CA certificates, tzdata"}, {app, "platformd binary"}} {
		layer, err := l.l.layer()
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: o.Created}, CreatedBy: l.by,
		}})
		if err != nil {
			return nil, fmt.Errorf("error appending layer: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("error reading config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = o.Arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		// The entry point is the binary and the default command is `run`
		// with the mounted config, so that the same image also runs
		// `migrate -config ...` or `check -config ...` as its arguments.
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"run", "-config", ConfigPath},
		User:       fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/bin",
			"SSL_CERT_FILE=" + CACertsPath,
			"ZONEINFO=" + ZoneinfoPath,
		},
		ExposedPorts: map[string]struct{}{"7070/tcp": {}, "9464/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "platformd",
			"org.opencontainers.image.description": "idempotent-consumer platform: RabbitMQ to PostgreSQL with transactional dedup",
			"org.opencontainers.image.source":      "https://github.com/platformd/platformd",
			"org.opencontainers.image.version":     o.Version,
		},
		StopSignal: "SIGTERM",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("error setting config: %w", err)
	}
	return img, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// layerBuilder writes a deterministic tar: fixed times, root ownership,
// entries in the order added (callers add parents first).
type layerBuilder struct {
	buf     bytes.Buffer
	tw      *tar.Writer
	created time.Time
	err     error
}

func newLayer(created time.Time) *layerBuilder {
	b := &layerBuilder{created: created}
	b.tw = tar.NewWriter(&b.buf)
	return b
}

func (b *layerBuilder) header(h *tar.Header) {
	if b.err != nil {
		return
	}
	h.ModTime, h.Format = b.created, tar.FormatPAX
	h.Uname, h.Gname = "root", "root"
	b.err = b.tw.WriteHeader(h)
}

func (b *layerBuilder) dir(name string, mode int64) {
	b.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
}

func (b *layerBuilder) file(name string, mode int64, data []byte) {
	b.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))})
	if b.err == nil {
		_, b.err = b.tw.Write(data)
	}
}

// tree copies the directory src to dst (a path in the image), regular
// files and symlinks, sorted; Debian's "right/" leap-second copy of tzdata
// is left out (Go never reads it).
func (b *layerBuilder) tree(src, dst string) error {
	var paths []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() && rel == "right" {
			return filepath.SkipDir
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return fmt.Errorf("error walking %s: %w", src, err)
	}
	sort.Strings(paths)
	for _, rel := range paths {
		p := filepath.Join(src, rel)
		target := dst
		if rel != "." {
			target = dst + "/" + filepath.ToSlash(rel)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("error reading %s: %w", p, err)
		}
		switch {
		case fi.IsDir():
			b.dir(target, 0o755)
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("error reading link %s: %w", p, err)
			}
			b.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: target, Linkname: link, Mode: 0o777})
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("error reading %s: %w", p, err)
			}
			b.file(target, 0o644, data)
		}
	}
	return nil
}

// layer closes the tar and returns it as a gzip-compressed OCI layer.
func (b *layerBuilder) layer() (v1.Layer, error) {
	if b.err == nil {
		b.err = b.tw.Close()
	}
	if b.err != nil {
		return nil, fmt.Errorf("error writing layer: %w", b.err)
	}
	data := b.buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("error creating layer: %w", err)
	}
	return l, nil
}
