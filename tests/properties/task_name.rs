//! A task's names (issue 41, `support/task_name.rs`): whatever the title, the slug is nothing or
//! plain `[a-z0-9]` runs joined by single `-` within its bound, so it is at once a branch name git
//! takes, a folder name with no path in it, and the name a project set's discovery gives that
//! folder; a base branch name passed by the check holds nothing a shell or git's options read.

use opencode_gateway::config::discover::project_name;
use opencode_gateway::support::task_name::{base_refusal, slug};
use proptest::prelude::*;

proptest! {
    #[test]
    fn any_title_gives_a_plain_slug_that_discovery_names_the_same(title in any::<String>(), max in 1usize..64) {
        if let Some(s) = slug(&title, max) {
            prop_assert!(s.len() <= max, "{s:?} over {max}");
            prop_assert!(s.split('-').all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())), "{s:?}");
            prop_assert_eq!(project_name("app", &s), format!("app-{s}"));
        } else {
            prop_assert!(!title.chars().any(|c| c.is_ascii_alphanumeric()) || max == 0, "{title:?} had a letter");
        }
    }

    #[test]
    fn a_base_that_passes_holds_no_option_no_range_and_no_shell(name in "[-a-z./@{}~^:;$ `]{0,12}") {
        if base_refusal(&name).is_none() {
            let plain = !name.starts_with('-') && !name.contains("..") && !name.contains("@{");
            prop_assert!(plain, "{:?}", name);
            prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)), "{name:?}");
        }
    }
}
