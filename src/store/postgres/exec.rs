//! The store's statements on a PostgreSQL connection or transaction ([`Exec`]), its parameters
//! as PostgreSQL takes them and its rows as it gives them.

use postgres::types::{ToSql, Type};

use super::conn::Sql;
use crate::store::backend::{Bind, EachRow, Exec, Param, Row, Value};
use crate::store::statements::{Dialect, Statement};
use crate::store::{Changed, StoreError};

impl Param<'_> {
    fn postgres(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Int(v) => v,
            Param::Real(v) => v,
            Param::Text(v) => v,
            Param::Bytes(v) => v,
        }
    }
}

/// Run `run` with `params` as PostgreSQL takes them.
fn bound<T>(params: &[&dyn Bind], run: impl FnOnce(&[&(dyn ToSql + Sync)]) -> T) -> T {
    let params: Vec<Param<'_>> = params.iter().map(|p| p.param()).collect();
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::postgres).collect();
    run(&refs)
}

impl<S: Sql> Exec for S {
    fn execute(&self, statement: &'static Statement, params: &[&dyn Bind]) -> Result<usize, StoreError> {
        let n = bound(params, |p| Sql::execute(self, statement.sql(Dialect::Postgres), p))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn each_row(
        &self,
        statement: &'static Statement,
        params: &[&dyn Bind],
        each: EachRow<'_>,
    ) -> Result<(), StoreError> {
        for row in bound(params, |p| self.query(statement.sql(Dialect::Postgres), p))? {
            each(&row)?;
        }
        Ok(())
    }

    fn notify(&self, what: Changed) -> Result<(), StoreError> {
        super::shared::notify(self, what)
    }

    fn hold(&self, name: &str) -> Result<(), StoreError> {
        Sql::execute(self, "SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])?;
        Ok(())
    }
}

impl Row for postgres::Row {
    /// By the column's type: the schema's (`BIGINT`, `DOUBLE PRECISION`, `TEXT`, `BYTEA`) and a
    /// test's `BOOLEAN`.
    fn value(&self, i: usize) -> Result<Value, StoreError> {
        let Some(column) = self.columns().get(i) else {
            return Err(StoreError::Backend(format!("no column {i}")));
        };
        let value = match *column.type_() {
            Type::INT8 => self.try_get::<_, Option<i64>>(i)?.map(Value::Int),
            Type::FLOAT8 => self.try_get::<_, Option<f64>>(i)?.map(Value::Real),
            Type::TEXT | Type::VARCHAR => self.try_get::<_, Option<String>>(i)?.map(Value::Text),
            Type::BYTEA => self.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes),
            Type::BOOL => self.try_get::<_, Option<bool>>(i)?.map(Value::Bool),
            ref other => {
                return Err(StoreError::Backend(format!(
                    "column {i} is {other}, not a type the store keeps"
                )));
            }
        };
        Ok(value.unwrap_or(Value::Null))
    }
}
