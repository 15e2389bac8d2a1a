//! `task new`: ask the running gateway over its control socket (`front/control_tasks.rs`).

use std::path::Path;

use anyhow::bail;

use super::admin_client::request_with;
use crate::cli::args::TaskAction;

pub fn task(config: &Path, action: TaskAction) -> anyhow::Result<()> {
    let TaskAction::New {
        set,
        title,
        prompt,
        user,
        base,
        agent,
        model,
    } = action;
    let body = serde_json::json!({"set": set, "title": title, "prompt": prompt, "as": user,
        "base": base, "agent": agent, "model": model});
    let (code, answer) = request_with(config, "POST", "/task/new", &body.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
    if code != 200 {
        let step = v["step"].as_str().unwrap_or("?");
        bail!(
            "the task was not made (step {step}): {}",
            v["error"].as_str().unwrap_or(answer.trim())
        );
    }
    let s = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    println!(
        "task {title:?}: branch {} from {} in {}",
        s("branch"),
        s("base"),
        s("folder")
    );
    println!("project {}: session {} prompted", s("project"), s("session"));
    for missing in v["missing_files"].as_array().into_iter().flatten() {
        println!(
            "note: worktree_files: the checkout has no {}",
            missing.as_str().unwrap_or("?")
        );
    }
    Ok(())
}
