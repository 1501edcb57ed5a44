//! Picking the device from the `device` param: the one place that knows which backends this
//! binary was built with. `flex` (pure Rust) is always there; libtorch (CPU and CUDA) only with
//! the `tch` feature.

use burn::tensor::Device;

/// What a `device:` param asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// CUDA if this build has it and a GPU is visible, else the best CPU backend.
    Auto,
    /// The best CPU backend of this build (libtorch with `tch`, else flex).
    Cpu,
    /// burn's pure-Rust CPU backend.
    Flex,
    /// libtorch on the CPU (`tch` builds only).
    TchCpu,
    /// libtorch on GPU N (`tch` builds only).
    Cuda(usize),
}

/// Why a device cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Not a device name.
    #[error("unknown device {0:?}: expected auto, cpu, flex, tch-cpu or cuda:N")]
    Unknown(String),
    /// A libtorch device in a build without the `tch` feature.
    #[error(
        "device {0} needs the libtorch backend, and this `pipeline` was built without it \
         (backends: {backends}). Build with `scripts/build-tch.sh` (cargo feature `tch`), or use \
         `device: cpu`.",
        backends = backends()
    )]
    NeedsTch(String),
    /// A CUDA device libtorch does not see.
    #[error(
        "device cuda:{asked} asked for, but libtorch sees {visible} CUDA device(s) \
         (check nvidia-smi, CUDA_VISIBLE_DEVICES and that LD_LIBRARY_PATH holds torch/lib)"
    )]
    NoSuchCuda {
        /// The index asked for.
        asked: usize,
        /// How many libtorch sees.
        visible: usize,
    },
}

/// For callers whose errors are still strings (the engine's `Stage::validate`).
impl From<DeviceError> for String {
    fn from(e: DeviceError) -> String {
        e.to_string()
    }
}

/// A `device` param that names no device this build has.
impl From<DeviceError> for pipeline_params::ParamError {
    fn from(e: DeviceError) -> Self {
        pipeline_params::ParamError(e.to_string())
    }
}

impl DeviceChoice {
    /// The choice a `device:` param or `--device` flag names.
    pub fn parse(s: &str) -> Result<DeviceChoice, DeviceError> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "flex" => Ok(DeviceChoice::Flex),
            "tch-cpu" | "libtorch" => Ok(DeviceChoice::TchCpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceChoice::Cuda(n)),
                _ => Err(DeviceError::Unknown(other.to_string())),
            },
        }
    }
}

/// Whether this binary was built with the libtorch backend.
pub const HAS_TCH: bool = cfg!(feature = "tch");

/// The backends this binary can run on, for messages and `--version`-like output.
pub fn backends() -> &'static str {
    if HAS_TCH {
        "flex (CPU), libtorch (CPU, CUDA)"
    } else {
        "flex (CPU)"
    }
}

/// A resolved device and a name for logs and metrics (`flex`, `libtorch-cpu`, `cuda:0`).
#[derive(Debug, Clone)]
pub struct ResolvedDevice {
    /// The burn device.
    pub device: Device,
    /// Its name for logs and metrics.
    pub name: String,
    /// Whether it is a GPU (the pretrain stage reports MFU only there).
    pub is_gpu: bool,
    /// The GPU's model as its driver names it (`NVIDIA H200`), when it is one and the driver
    /// says: results from different GPUs must not read as one ([`gpu_model`]).
    pub model: Option<String>,
}

/// The model of CUDA device `index` as the NVIDIA driver names it (`NVIDIA H200`), from
/// `nvidia-smi` (tch 0.22 exposes no device properties); `None` where the tool is missing or
/// says nothing. Indexes follow `CUDA_VISIBLE_DEVICES` only as far as nvidia-smi's own order
/// matches CUDA's, which holds on the one-GPU machines this reports on.
pub fn gpu_model(index: usize) -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader", "-i"])
        .arg(index.to_string())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text.lines().next()?.trim();
    (out.status.success() && !name.is_empty() && name.len() <= 100).then(|| name.to_string())
}

/// Whether `device` (with or without autodiff) computes on the CPU: flex, or libtorch's CPU.
pub fn is_cpu(device: &Device) -> bool {
    let plain = device.clone().without_autodiff();
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    if plain == Device::libtorch() {
        return true;
    }
    plain == Device::flex()
}

/// Whether `device` (with or without autodiff) has bf16 matrix products, which mixed
/// precision needs: libtorch has them on the CPU and on CUDA. flex is refused: burn-flex 0.22
/// multiplies bf16 by converting both operands to float32 and back, so mixed precision there
/// would only add conversions and rounding.
pub fn has_bf16(device: &Device) -> bool {
    device.clone().without_autodiff() != Device::flex()
}

/// The device `choice` names, or an error saying how to get it.
pub fn resolve(choice: DeviceChoice) -> Result<ResolvedDevice, DeviceError> {
    let flex = || ResolvedDevice {
        device: Device::flex(),
        name: "flex".into(),
        is_gpu: false,
        model: None,
    };
    match choice {
        DeviceChoice::Flex => Ok(flex()),
        DeviceChoice::Cpu | DeviceChoice::Auto if !HAS_TCH => Ok(flex()),
        DeviceChoice::TchCpu if !HAS_TCH => Err(DeviceError::NeedsTch("tch-cpu".into())),
        DeviceChoice::Cuda(n) if !HAS_TCH => Err(DeviceError::NeedsTch(format!("cuda:{n}"))),
        #[cfg(feature = "tch")]
        other => tch_device(other),
        #[cfg(not(feature = "tch"))]
        _ => unreachable!("every choice is handled above without tch"),
    }
}

#[cfg(feature = "tch")]
#[allow(deprecated)] // burn marks its libtorch backend deprecated; it is the one that builds offline.
fn tch_device(choice: DeviceChoice) -> Result<ResolvedDevice, DeviceError> {
    let cuda_count = tch::Cuda::device_count().max(0) as usize;
    let cpu = || ResolvedDevice {
        device: Device::libtorch(),
        name: "libtorch-cpu".into(),
        is_gpu: false,
        model: None,
    };
    match choice {
        DeviceChoice::Auto if cuda_count > 0 => Ok(ResolvedDevice {
            device: Device::libtorch_cuda(0),
            name: "cuda:0".into(),
            is_gpu: true,
            model: gpu_model(0),
        }),
        DeviceChoice::Auto | DeviceChoice::Cpu | DeviceChoice::TchCpu => Ok(cpu()),
        DeviceChoice::Cuda(n) if n < cuda_count => Ok(ResolvedDevice {
            device: Device::libtorch_cuda(n),
            name: format!("cuda:{n}"),
            is_gpu: true,
            model: gpu_model(n),
        }),
        DeviceChoice::Cuda(n) => Err(DeviceError::NoSuchCuda {
            asked: n,
            visible: cuda_count,
        }),
        DeviceChoice::Flex => Ok(ResolvedDevice {
            device: Device::flex(),
            name: "flex".into(),
            is_gpu: false,
            model: None,
        }),
    }
}

/// The device the crate's tests run on: `ALBERT_TEST_DEVICE` (any `device` name, e.g.
/// `tch-cpu` in a `tch` build), else flex; without autodiff.
#[cfg(test)]
pub(crate) fn under_test() -> Device {
    let name = std::env::var("ALBERT_TEST_DEVICE").unwrap_or_else(|_| "flex".into());
    let choice = DeviceChoice::parse(&name).unwrap_or_else(|e| panic!("ALBERT_TEST_DEVICE: {e}"));
    resolve(choice)
        .unwrap_or_else(|e| panic!("ALBERT_TEST_DEVICE={name}: {e}"))
        .device
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_explains() {
        assert_eq!(DeviceChoice::parse("cuda:1"), Ok(DeviceChoice::Cuda(1)));
        assert_eq!(DeviceChoice::parse("cpu"), Ok(DeviceChoice::Cpu));
        assert!(
            DeviceChoice::parse("gpu")
                .unwrap_err()
                .to_string()
                .contains("expected auto")
        );
        assert!(DeviceChoice::parse("cuda:x").is_err());
        if !HAS_TCH {
            let e = resolve(DeviceChoice::Cuda(0)).unwrap_err().to_string();
            assert!(
                e.contains("built without") && e.contains("build-tch.sh"),
                "{e}"
            );
            assert_eq!(resolve(DeviceChoice::Auto).unwrap().name, "flex");
        }
        for choice in [DeviceChoice::Cpu, DeviceChoice::Flex] {
            let d = resolve(choice).unwrap().device;
            assert!(is_cpu(&d) && is_cpu(&d.clone().autodiff()), "{choice:?}");
            assert_eq!(
                has_bf16(&d.autodiff()),
                HAS_TCH && choice == DeviceChoice::Cpu
            );
        }
    }
}
