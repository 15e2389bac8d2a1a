//! What an entry of a project set's folder is, read here (`discover.rs`) or listed on a box
//! (`discover_box.rs`): the one thing discovery asks of it.

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Dir,
    /// A symbolic link, to what it says.
    Link(String),
    Other,
}
