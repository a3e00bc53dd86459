//! Records the rustc version for `kernel_info_reply`'s `language_info.version`.
fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=DDP_KERNEL_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
