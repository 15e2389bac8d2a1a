//! What `doctor` found: each finding as `ok`, `warn` or `fail` with the fix. Its own file so that
//! the checks of the gateway (`doctor.rs`) and of its boxes (`doctor_boxes.rs`) both write to it
//! without importing each other.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Ok,
    Warn,
    Fail,
}

pub(crate) struct Finding {
    pub level: Level,
    pub what: String,
}

#[derive(Default)]
pub(crate) struct Report(pub Vec<Finding>);

impl Report {
    pub(crate) fn ok(&mut self, what: impl Into<String>) {
        self.0.push(Finding {
            level: Level::Ok,
            what: what.into(),
        });
    }
    pub(crate) fn warn(&mut self, what: impl Into<String>) {
        self.0.push(Finding {
            level: Level::Warn,
            what: what.into(),
        });
    }
    pub(crate) fn fail(&mut self, what: impl Into<String>) {
        self.0.push(Finding {
            level: Level::Fail,
            what: what.into(),
        });
    }

    pub(crate) fn render(&self) -> String {
        self.0
            .iter()
            .map(|f| {
                let tag = match f.level {
                    Level::Ok => "ok  ",
                    Level::Warn => "warn",
                    Level::Fail => "fail",
                };
                format!("{tag} {}\n", f.what)
            })
            .collect()
    }

    pub(crate) fn failures(&self) -> usize {
        self.0.iter().filter(|f| f.level == Level::Fail).count()
    }
}
