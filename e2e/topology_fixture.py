"""A small sysfs-shaped tree for the probe's e2e tests (trainlet probe
--sysfs-root, TRAINLET_SYSFS_ROOT), laid out as real sysfs is: devices under
devices/pci<dom>:<bus>/..., and bus/pci/devices, class/infiniband and
class/net as RELATIVE symlinks into devices/ (topology/testing/sysfs_builder.h
builds the unit tests' fixtures the same way).

two_gpu_node(root, cpus) -> two H100s on two NUMA nodes (GPU 0 on node 0 at
0000:18:00.0, GPU 1 on node 1 at 0000:9a:00.0), one ConnectX-7 (mlx5_0, port
ACTIVE) beside GPU 0, eth0 a veth; NUMA node i holds the CPUs cpus[i] (a
cpulist string), so that a test can bind workers to CPUs this machine has.
Plus the fake NVML's JSON for the same two GPUs (nvml_json), and
driver_procfs(root, gpus): what the NVIDIA driver and the container toolkit
leave in a container for the GPUs it was given (root/proc/driver/nvidia/gpus/
<bus id>/information, root/proc/driver/nvidia/version, root/dev/nvidia<minor>
and root/dev/nvidiactl), read by a static trainlet instead of NVML with
TRAINLET_PROBE_ROOT=root.
"""

import json
import os

GPU_BUS_IDS = ["0000:18:00.0", "0000:9a:00.0"]
GPU_UUIDS = ["GPU-00000000-0000-0000-0000-00000000000%d" % i for i in range(2)]


def _write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def _symlink(root, link, target):
    """A relative symlink at `link` to `target` (both below root)."""
    full_link = os.path.join(root, link.lstrip("/"))
    full_target = os.path.join(root, target.lstrip("/"))
    os.makedirs(os.path.dirname(full_link), exist_ok=True)
    os.symlink(os.path.relpath(full_target, os.path.dirname(full_link)), full_link)


def _pci(root, path, cls, vendor, device, numa):
    d = "/sys" + path
    _write(root, d + "/class", cls + "\n")
    _write(root, d + "/vendor", vendor + "\n")
    _write(root, d + "/device", device + "\n")
    _write(root, d + "/numa_node", "%d\n" % numa)
    _write(root, d + "/max_link_speed", "32.0 GT/s PCIe\n")
    _write(root, d + "/max_link_width", "16\n")
    _symlink(root, d + "/subsystem", "/sys/bus/pci")
    _symlink(root, "/sys/bus/pci/devices/" + os.path.basename(path), d)


def _cpumap(cpulist):
    mask = 0
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for c in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << c
    return "%08x" % mask


def two_gpu_node(root, cpus=("0", "1")):
    os.makedirs(os.path.join(root, "sys/bus/pci"), exist_ok=True)
    # Socket 0: root port 17:01.0 -> GPU 0; root port 17:02.0 -> mlx5_0.
    _pci(root, "/devices/pci0000:17/0000:17:01.0", "0x060400", "0x8086", "0x352a", 0)
    _pci(root, "/devices/pci0000:17/0000:17:01.0/0000:18:00.0", "0x030200", "0x10de",
         "0x2330", 0)
    _pci(root, "/devices/pci0000:17/0000:17:02.0", "0x060400", "0x8086", "0x352a", 0)
    nic = "/devices/pci0000:17/0000:17:02.0/0000:19:00.0"
    _pci(root, nic, "0x020700", "0x15b3", "0x1021", 0)
    ib = "/sys" + nic + "/infiniband/mlx5_0"
    _symlink(root, ib + "/device", "/sys" + nic)
    for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                        ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
        _write(root, ib + "/ports/1/" + name, value + "\n")
    _symlink(root, "/sys/class/infiniband/mlx5_0", ib)
    # Socket 1: root port 99:01.0 -> GPU 1.
    _pci(root, "/devices/pci0000:99/0000:99:01.0", "0x060400", "0x8086", "0x352a", 1)
    _pci(root, "/devices/pci0000:99/0000:99:01.0/0000:9a:00.0", "0x030200", "0x10de",
         "0x2330", 1)
    # eth0: a veth (no PCI device), as in a pod.
    _write(root, "/sys/devices/virtual/net/eth0/operstate", "up\n")
    _symlink(root, "/sys/class/net/eth0", "/sys/devices/virtual/net/eth0")
    for i, cpulist in enumerate(cpus):
        _write(root, "/sys/devices/system/node/node%d/cpulist" % i, cpulist + "\n")
        _write(root, "/sys/devices/system/node/node%d/cpumap" % i, _cpumap(cpulist) + "\n")
    return os.path.join(root, "sys")


def nvml_json(path):
    """The fake libnvidia-ml.so.1's description of the same two GPUs."""
    devices = []
    for i, bus in enumerate(GPU_BUS_IDS):
        devices.append({
            "uuid": GPU_UUIDS[i], "name": "NVIDIA H100 80GB HBM3", "busId": bus,
            "pciDeviceId": "0x233010de", "pciSubSystemId": "0x16c110de", "cc": [9, 0],
            "minor": i, "pcie": {"gen": 5, "width": 16},
            "memory": {"total": 85520809984, "free": 84935524352, "used": 585285632},
            "cpuList": "0-1",
        })
    with open(path, "w") as f:
        json.dump({"driverVersion": "550.54.15", "cudaDriverVersion": 12040,
                   "devices": devices}, f)
    return path


DRIVER_VERSION = "550.54.15"


def driver_procfs(root, gpus=(0, 1)):
    """The driver's procfs and device nodes for GPU_BUS_IDS[i], i in gpus
    (device minor i, UUID GPU_UUIDS[i]), in the 5xx drivers' layout."""
    for i in gpus:
        bus = GPU_BUS_IDS[i]
        _write(root, "/proc/driver/nvidia/gpus/%s/information" % bus,
               "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t %s\n"
               "Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
               "DMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\n"
               "GPU Firmware: \t %s\nGPU Excluded:\t No\n"
               % (GPU_UUIDS[i], bus, i, DRIVER_VERSION))
        _write(root, "/dev/nvidia%d" % i, "")
    _write(root, "/dev/nvidiactl", "")
    _write(root, "/proc/driver/nvidia/version",
           "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Mar  5 22:23:56 UTC 2024\n"
           % DRIVER_VERSION)
    return root
