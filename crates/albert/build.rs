//! Build script: in `tch` builds, compiles the C++ that reaches what `tch` 0.22 does not wrap
//! (`src/fused/torch_vjp.cpp`, a backward with a given output gradient;
//! `src/fused/torch_upload.cpp`, pinning without the deprecated device argument;
//! `src/cuda_sync.cpp`, torch's CUDA sync debug mode; `src/op_tally.cpp`, torch's operator
//! observers; `src/torch_trace.cpp`, torch's profiler and its trace) against the libtorch that
//! torch-sys links, with the same headers and C++ ABI. Flex builds compile nothing.

fn main() {
    #[cfg(feature = "tch")]
    torch_vjp::compile();
}

#[cfg(feature = "tch")]
mod torch_vjp {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    const SOURCES: [&str; 5] = [
        "src/fused/torch_vjp.cpp",
        "src/fused/torch_upload.cpp",
        "src/cuda_sync.cpp",
        "src/op_tally.cpp",
        "src/torch_trace.cpp",
    ];

    pub fn compile() {
        for source in SOURCES {
            println!("cargo:rerun-if-changed={source}");
        }
        println!("cargo:rerun-if-changed=src/fused/torch_error.h");
        // torch-sys (`links = "tch"`) passes the libtorch it linked as DEP_TCH_LIBTORCH_LIB.
        let lib = PathBuf::from(
            std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys gives its libtorch lib dir"),
        );
        let include = include_dir(&lib);
        cc::Build::new()
            .cpp(true)
            .pic(true)
            .warnings(false)
            .include(&include)
            .include(include.join("torch/csrc/api/include"))
            .flag("-std=c++17")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={}", cxx11_abi()))
            .flag("-DGLOG_USE_GLOG_EXPORT")
            .files(SOURCES)
            .compile("pipeline_torch_shim");
    }

    /// libtorch's header directory: `LIBTORCH_INCLUDE` when set (as torch-sys reads it), else
    /// the `include` beside the lib directory (a libtorch archive and Python's torch alike).
    fn include_dir(lib: &Path) -> PathBuf {
        println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
        match std::env::var_os("LIBTORCH_INCLUDE") {
            Some(dir) => PathBuf::from(dir).join("include"),
            None => lib.join("..").join("include"),
        }
    }

    /// The `_GLIBCXX_USE_CXX11_ABI` libtorch was built with, found as torch-sys finds it: the
    /// Python torch's own flag when `LIBTORCH_USE_PYTORCH` is set, else `LIBTORCH_CXX11_ABI`,
    /// else 1. A mismatch breaks every `std::string` that crosses into libtorch.
    fn cxx11_abi() -> String {
        for var in ["LIBTORCH_USE_PYTORCH", "LIBTORCH_CXX11_ABI", "VIRTUAL_ENV"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        if std::env::var_os("LIBTORCH_USE_PYTORCH").is_none() {
            return std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
        }
        // The interpreter torch-sys runs: the active virtualenv's `python`, else `python3`.
        let python = if std::env::var_os("VIRTUAL_ENV").is_some() {
            "python"
        } else {
            "python3"
        };
        let asked = Command::new(python)
            .args([
                "-c",
                "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))",
            ])
            .output()
            .expect("running python to ask torch for its C++ ABI");
        let abi = String::from_utf8_lossy(&asked.stdout).trim().to_owned();
        assert!(
            abi == "0" || abi == "1",
            "torch's C++ ABI flag from {python}: {abi:?}"
        );
        abi
    }
}
