//! What a backend gives the store: statements run on its connection, in a transaction or not,
//! with parameters and columns of the few kinds the schema has (integers, reals, text, bytes and
//! the booleans a test yields). The store's traits are written once over it (`logins.rs`,
//! `kept.rs`), with the statements of `statements.rs`: SQLite and PostgreSQL each implement
//! [`Backend`] and [`Exec`], and a third backend would do the same and add a [`Dialect`].
//!
//! [`Dialect`]: super::statements::Dialect

use std::borrow::Cow;

use super::statements::Statement;
use super::{Changed, StoreError, WriteNotes};

/// A statement's parameter, typed even when null (PostgreSQL checks a parameter's type against
/// the column's, null or not).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param<'a> {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<Cow<'a, str>>),
    Bytes(Option<&'a [u8]>),
}

/// A value a statement takes.
pub(crate) trait Bind {
    fn param(&self) -> Param<'_>;
}

/// Binds for a kind of value and its nullable form: `$type => $variant(v => as the variant holds v)`.
macro_rules! binds {
    ($($type:ty => $variant:ident($v:ident => $held:expr)),* $(,)?) => {$(
        impl Bind for $type {
            fn param(&self) -> Param<'_> {
                let $v = self;
                Param::$variant(Some($held))
            }
        }
        impl Bind for Option<$type> {
            fn param(&self) -> Param<'_> {
                Param::$variant(self.as_ref().map(|$v| $held))
            }
        }
    )*};
}

binds! {
    i64 => Int(v => *v),
    f64 => Real(v => *v),
    String => Text(v => Cow::Borrowed(v.as_str())),
    Vec<u8> => Bytes(v => v.as_slice()),
    [u8; 32] => Bytes(v => v.as_slice()),
    // A list of names (a token's projects) is stored comma-separated ([`Column`]).
    Vec<String> => Text(v => Cow::Owned(v.join(","))),
}

impl Bind for str {
    fn param(&self) -> Param<'_> {
        Param::Text(Some(Cow::Borrowed(self)))
    }
}

impl Bind for Option<&str> {
    fn param(&self) -> Param<'_> {
        Param::Text(self.map(Cow::Borrowed))
    }
}

impl Bind for [u8] {
    fn param(&self) -> Param<'_> {
        Param::Bytes(Some(self))
    }
}

impl<T: Bind + ?Sized> Bind for &T {
    fn param(&self) -> Param<'_> {
        (**self).param()
    }
}

/// A column's value as a backend gives it; the record's field decides what it may be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

/// A row a statement found, read by column number.
pub(crate) trait Row {
    fn value(&self, i: usize) -> Result<Value, StoreError>;
}

/// A column's value as a record holds it.
pub(crate) trait Column: Sized {
    fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError>;
}

fn unexpected(i: usize, found: &Value) -> StoreError {
    StoreError::Backend(format!("column {i} holds {found:?}, not what the record keeps there"))
}

/// Columns of a kind, nullable or not: `$type => the Value that holds it`.
macro_rules! columns {
    ($($type:ty => $variant:ident),* $(,)?) => {$(
        impl Column for Option<$type> {
            fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError> {
                match row.value(i)? {
                    Value::Null => Ok(None),
                    Value::$variant(v) => Ok(Some(v)),
                    other => Err(unexpected(i, &other)),
                }
            }
        }
        impl Column for $type {
            fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError> {
                Option::<$type>::read(row, i)?.ok_or_else(|| unexpected(i, &Value::Null))
            }
        }
    )*};
}

columns! {
    i64 => Int,
    f64 => Real,
    String => Text,
    Vec<u8> => Bytes,
}

/// A test's answer (`revoked_at IS NOT NULL`): a boolean, or an integer where SQL has none
/// (SQLite).
impl Column for bool {
    fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError> {
        match row.value(i)? {
            Value::Bool(b) => Ok(b),
            Value::Int(n) => Ok(n != 0),
            other => Err(unexpected(i, &other)),
        }
    }
}

/// A digest column; a stored value of another length reads as zeros.
impl Column for [u8; 32] {
    fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError> {
        Ok(Vec::<u8>::read(row, i)?.try_into().unwrap_or([0; 32]))
    }
}

/// A list of names as stored: comma-separated (a token's projects; null: all the user's).
impl Column for Option<Vec<String>> {
    fn read(row: &dyn Row, i: usize) -> Result<Self, StoreError> {
        let stored: Option<String> = Column::read(row, i)?;
        Ok(stored.map(|p| p.split(',').filter(|s| !s.is_empty()).map(String::from).collect()))
    }
}

/// What one row of a statement reads as: a record (`logins.rs`, `kept.rs`), a column, or a few.
pub(crate) trait FromRow: Sized {
    fn from_row(row: &dyn Row) -> Result<Self, StoreError>;
}

impl<T: Column> FromRow for T {
    fn from_row(row: &dyn Row) -> Result<Self, StoreError> {
        T::read(row, 0)
    }
}

/// A few columns, in order.
macro_rules! tuples {
    ($(($($column:ident $i:tt),*)),* $(,)?) => {$(
        impl<$($column: Column),*> FromRow for ($($column,)*) {
            fn from_row(row: &dyn Row) -> Result<Self, StoreError> {
                Ok(($($column::read(row, $i)?,)*))
            }
        }
    )*};
}

tuples!((A 0, B 1), (A 0, B 1, C 2));

/// A row's columns, read in order.
pub(crate) struct Columns<'r> {
    row: &'r dyn Row,
    next: usize,
}

impl<'r> Columns<'r> {
    pub(crate) fn new(row: &'r dyn Row) -> Columns<'r> {
        Columns { row, next: 0 }
    }

    /// The next column.
    pub(crate) fn take<T: Column>(&mut self) -> Result<T, StoreError> {
        self.next += 1;
        T::read(self.row, self.next - 1)
    }
}

/// A record the store keeps as one row: its fields, in order, are the columns the statements
/// name for it (`statements.rs`), read by [`FromRow`] and written by [`Record::fields`].
pub(crate) trait Record: FromRow {
    fn fields(&self) -> Vec<&dyn Bind>;
}

/// [`Record`] for a struct whose fields are these columns.
macro_rules! record {
    ($record:ident { $($field:ident),* $(,)? }) => {
        impl $crate::store::backend::FromRow for $record {
            fn from_row(row: &dyn $crate::store::backend::Row) -> Result<Self, $crate::store::StoreError> {
                let mut columns = $crate::store::backend::Columns::new(row);
                Ok($record { $($field: columns.take()?),* })
            }
        }
        impl $crate::store::backend::Record for $record {
            fn fields(&self) -> Vec<&dyn $crate::store::backend::Bind> {
                vec![$(&self.$field),*]
            }
        }
    };
}
pub(crate) use record;

/// What [`Exec::each_row`] hands each row to.
pub(crate) type EachRow<'a> = &'a mut dyn FnMut(&dyn Row) -> Result<(), StoreError>;

/// Work on a backend's connection or in its transaction ([`Backend`]).
pub(crate) trait Work<T>: FnOnce(&dyn Exec) -> Result<T, StoreError> + Send {}
impl<T, F: FnOnce(&dyn Exec) -> Result<T, StoreError> + Send> Work<T> for F {}

/// Statements on a backend's connection, or in its transaction.
pub(crate) trait Exec {
    /// Run `statement`; how many rows it changed.
    fn execute(&self, statement: &'static Statement, params: &[&dyn Bind]) -> Result<usize, StoreError>;
    /// Run `statement`, handing each row it finds to `each` in turn.
    fn each_row(
        &self,
        statement: &'static Statement,
        params: &[&dyn Bind],
        each: EachRow<'_>,
    ) -> Result<(), StoreError>;
    /// Tell the other gateways on this database that `what` changed, when the transaction
    /// commits; nothing where a database has one gateway.
    fn notify(&self, _what: Changed) -> Result<(), StoreError> {
        Ok(())
    }
    /// Hold a lock named `name` until the transaction ends, so that of two gateways writing
    /// under one name, one waits for the other; nothing where a transaction holds the whole
    /// database already.
    fn hold(&self, _name: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Every row `statement` finds.
pub(crate) fn all<T: FromRow>(
    c: &dyn Exec,
    statement: &'static Statement,
    params: &[&dyn Bind],
) -> Result<Vec<T>, StoreError> {
    let mut found = Vec::new();
    c.each_row(statement, params, &mut |row| {
        found.push(T::from_row(row)?);
        Ok(())
    })?;
    Ok(found)
}

/// The first row `statement` finds, if any.
pub(crate) fn one<T: FromRow>(
    c: &dyn Exec,
    statement: &'static Statement,
    params: &[&dyn Bind],
) -> Result<Option<T>, StoreError> {
    let mut found = None;
    c.each_row(statement, params, &mut |row| {
        if found.is_none() {
            found = Some(T::from_row(row)?);
        }
        Ok(())
    })?;
    Ok(found)
}

/// The row `statement` always finds (a count; a row the call just wrote).
pub(crate) fn the<T: FromRow>(
    c: &dyn Exec,
    statement: &'static Statement,
    params: &[&dyn Bind],
) -> Result<T, StoreError> {
    one(c, statement, params)?.ok_or_else(|| StoreError::Backend("a statement found no row where one must be".into()))
}

/// A count (of rows) as the traits give it.
pub(crate) fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// The migrations a database at schema version `have` lacks, of `all` (applied in order; a
/// database at version n has the first n).
pub(crate) fn pending(all: &'static [&'static str], have: usize) -> anyhow::Result<&'static [&'static str]> {
    all.get(have..).ok_or_else(|| {
        anyhow::anyhow!(
            "it is at schema version {have}, newer than this gateway knows ({}); fix: run the newer gateway",
            all.len()
        )
    })
}

/// A database the store's traits run on ([`super::Store`] is implemented for every one).
pub(crate) trait Backend: Send + Sync {
    /// Run `f` on the connection: a read, or a write of one statement.
    fn on_connection<T: Send>(&self, f: impl Work<T>) -> Result<T, StoreError>;
    /// Run `f` in a transaction, committed when `f` returns `Ok`. What it reads stays true until
    /// then: on SQLite the transaction holds the file; on PostgreSQL the statements that read to
    /// write lock their rows (`{for_update}`) or take [`Exec::hold`].
    fn in_transaction<T: Send>(&self, f: impl Work<T>) -> Result<T, StoreError>;
    /// The writes that failed.
    fn writes(&self) -> &WriteNotes;

    /// A write of one statement: its failure counted and said once per run of failures.
    fn write<T: Send>(&self, what: &'static str, f: impl Work<T>) -> Result<T, StoreError> {
        self.writes().noted(what, self.on_connection(f))
    }

    /// A write of several statements, in one transaction, counted as [`Backend::write`].
    fn write_all<T: Send>(&self, what: &'static str, f: impl Work<T>) -> Result<T, StoreError> {
        self.writes().noted(what, self.in_transaction(f))
    }
}
