# Versions of everything the offline kind e2e builds (sourced by the build scripts).
# Changing one changes the cache key of what depends on it.
K8S_VERSION=v1.37.2            # k8s.io/kubernetes (kube-apiserver/etcd from scripts/k8s-tools.sh)
CONTAINERD_VERSION=v2.4.2      # github.com/containerd/containerd/v2
RUNC_VERSION=v1.4.3            # github.com/opencontainers/runc (containerd 2.x needs runc >= 1.2; Debian has 1.1.5)
CNI_VERSION=v1.10.0            # github.com/containernetworking/plugins
CRICTL_VERSION=v1.37.0         # sigs.k8s.io/cri-tools
COREDNS_VERSION=v1.14.7        # github.com/coredns/coredns (tagged as kubeadm expects)
KIND_VERSION=v0.33.0           # sigs.k8s.io/kind
DEBIAN_SUITE=bookworm          # debootstrap base for node and Python images (python3 = 3.11)
ETCD_TAG=3.6.16-0              # the etcd scripts/k8s-tools.sh builds (its ETCD_VERSION)
# debootstrap --include lists of the base images (node: what kind's base image installs that we use)
NODE_PACKAGES="systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,procps,runc"
PYTHON_PACKAGES="python3,python3-venv,ca-certificates"
GO_RECIPE=1                    # bump when go-bins.sh changes how it builds
