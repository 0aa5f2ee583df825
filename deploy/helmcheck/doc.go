// Package helmcheck is the offline check of the Helm chart in
// deploy/helm/platformd, run as its tests (`make test` runs them with the
// other nested modules): `helm lint` and `helm template` through helm's own
// library (helm.sh/helm/v4: pkg/chart/v2/lint, loader, engine), then every
// rendered manifest strictly decoded into the Kubernetes API's typed
// structs (k8s.io/api), which rejects an unknown or misspelt field and a
// value of the wrong type. That decode stands in for kubeconform, whose
// JSON schemas would have to be downloaded: everything here works offline.
// A module of its own, so that helm's and Kubernetes' dependencies stay out
// of the product's go.mod.
package helmcheck
