# Sourced by the scripts that build Kubernetes binaries (hack/controlplane/build.sh, the control
# plane; hack/upstream/build.sh, upstream's e2e.test): one pinned version, stamped alike.
K8S_VERSION=v1.36.3

# The version stamp upstream's hack/lib/version.sh (kube::version::ldflags) sets, so that
# `--version` prints it; with -s -w.
k8s_version_ldflags() {
  local minor=${K8S_VERSION#v1.} build_date pkg ld="-s -w"
  minor=${minor%%.*}
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=$K8S_VERSION -X $pkg.buildDate=$build_date"
  done
  echo "$ld"
}
