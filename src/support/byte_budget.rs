//! A budget of bytes held at once, gateway-wide and per client address: what unsigned webhook
//! bodies may take of memory while they arrive (hostile round five, item 6: 60 connections each
//! sending most of an 8 MiB body took the gateway from 34 to 518 MiB). A body's room is taken
//! before a byte of it is read, for its declared length (or its bound when it declares none),
//! and given back when its holder is dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

pub struct ByteBudget {
    total: u64,
    per_address: u64,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: u64,
    by_address: HashMap<IpAddr, u64>,
}

/// Why a body's room was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every address together holds the gateway-wide bound.
    Gateway,
    /// This address holds its own bound.
    Address,
}

/// Room taken for `bytes` from `address`: given back when dropped.
pub struct Room<'b> {
    budget: &'b ByteBudget,
    address: IpAddr,
    bytes: u64,
}

impl ByteBudget {
    pub fn new(total: u64, per_address: u64) -> ByteBudget {
        ByteBudget {
            total,
            per_address: per_address.min(total),
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take room for `bytes` from `address`, or say which bound it would pass.
    pub fn take(&self, address: IpAddr, bytes: u64) -> Result<Room<'_>, Full> {
        let mut held = self.held();
        let mine = held.by_address.get(&address).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.per_address {
            return Err(Full::Address);
        }
        if held.total.saturating_add(bytes) > self.total {
            return Err(Full::Gateway);
        }
        held.total += bytes;
        *held.by_address.entry(address).or_default() += bytes;
        Ok(Room {
            budget: self,
            address,
            bytes,
        })
    }

    /// Bytes held now, by every address.
    pub fn in_use(&self) -> u64 {
        self.held().total
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        let mut held = self.budget.held();
        held.total -= self.bytes;
        if let Some(mine) = held.by_address.get_mut(&self.address) {
            *mine -= self.bytes;
            if *mine == 0 {
                held.by_address.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_bounded_per_address_and_in_all_and_given_back_when_dropped() {
        let b = ByteBudget::new(10, 4);
        let (one, two, three) = (
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([10, 0, 0, 2]),
            IpAddr::from([10, 0, 0, 3]),
        );
        let a = b.take(one, 3).unwrap();
        assert_eq!(b.take(one, 2).err(), Some(Full::Address), "one's 3 + 2 > 4");
        let c = b.take(two, 4).unwrap();
        let d = b.take(three, 3).unwrap();
        assert_eq!(b.in_use(), 10);
        assert_eq!(b.take(IpAddr::from([10, 0, 0, 4]), 1).err(), Some(Full::Gateway));
        drop(a);
        assert_eq!(b.in_use(), 7);
        let e = b.take(one, 3).unwrap();
        drop((c, d, e));
        assert_eq!(b.in_use(), 0);
        assert!(
            b.held().by_address.is_empty(),
            "no address is kept once it holds nothing"
        );
    }
}
