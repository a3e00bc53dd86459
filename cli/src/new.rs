//! `ddp new model DIR`: a crate of one's own, written and ready to build.

use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::commands::NewModelArgs;
use ddp_workspaces::scaffold::{self, Checkout};

pub fn model(args: &NewModelArgs) -> Result<ExitCode> {
    let checkout = Checkout::locate()?;
    let krate = scaffold::model::plan(&args.dir, args.name.as_deref(), &checkout)?;
    scaffold::model::write(&krate)?;
    let dir = krate.dir.display();
    println!("wrote the crate {} in {dir}:", krate.name);
    for (file, _) in &krate.files {
        println!("  {}", file.display());
    }
    println!(
        "against the ddp checkout {}\n\nnext:\n  cd {dir}\n  cargo test --release --offline    # 2 replicas, one epoch, test accuracy >= 90 %\n  cargo build --release --offline\n  ddp run model.toml --trainer target/release/{}",
        checkout.root.display(),
        krate.name
    );
    Ok(ExitCode::SUCCESS)
}
