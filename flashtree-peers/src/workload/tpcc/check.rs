//! TPC-C consistency conditions 1–4 (clause 3.3.2), per warehouse/district:
//! 1. W_YTD = sum(D_YTD).
//! 2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
//! 3. max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER for the district.
//! 4. sum(O_OL_CNT) = rows in ORDER-LINE for the district.
//!
//! A violation is returned as `KvError::Corrupt` naming the condition.

use super::rows::*;
use super::{get_row, key, key_part, table, Tpcc, DISTRICTS_PER_WAREHOUSE};
use crate::kv::{Kv, KvError};

fn violation(condition: u32, place: String, detail: String) -> KvError {
    KvError::Corrupt(format!(
        "TPC-C consistency condition {condition} violated at {place}: {detail}"
    ))
}

/// Checks all four conditions on every warehouse.
pub(super) async fn check_all<K: Kv>(tpcc: &Tpcc, kv: &K) -> Result<(), KvError> {
    let mut out = Vec::new();
    for w in 1..=tpcc.warehouses {
        let warehouse: Warehouse = get_row(kv, table::WAREHOUSE, &key(&[w]), &mut out).await?;
        let mut district_ytd_sum = 0;
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            let district: District = get_row(kv, table::DISTRICT, &key(&[w, d]), &mut out).await?;
            district_ytd_sum += district.ytd;
            check_district(kv, w, d, &district).await?;
        }
        if warehouse.ytd != district_ytd_sum {
            return Err(violation(
                1,
                format!("warehouse {w}"),
                format!("W_YTD {} != sum(D_YTD) {district_ytd_sum}", warehouse.ytd),
            ));
        }
    }
    Ok(())
}

async fn check_district<K: Kv>(kv: &K, w: u32, d: u32, district: &District) -> Result<(), KvError> {
    let place = format!("warehouse {w} district {d}");
    let prefix = key(&[w, d]);
    let expected_max = district.next_o_id - 1;
    // Orders: max O_ID and sum of O_OL_CNT.
    let (mut order_max, mut ol_cnt_sum, mut scan_error) = (0i64, 0i64, None);
    kv.scan(table::ORDER, &prefix, &mut |key_bytes, value| {
        if !key_bytes.starts_with(&prefix) {
            return false;
        }
        match (key_part(key_bytes, 2), Order::decode(value)) {
            (Ok(o), Ok(order)) => {
                order_max = order_max.max(o as i64);
                ol_cnt_sum += order.ol_cnt;
                true
            }
            (Err(e), _) | (_, Err(e)) => {
                scan_error = Some(e);
                false
            }
        }
    })
    .await?;
    if let Some(error) = scan_error {
        return Err(error);
    }
    if order_max != expected_max {
        return Err(violation(
            2,
            place,
            format!("D_NEXT_O_ID - 1 = {expected_max} but max(O_ID) = {order_max}"),
        ));
    }
    check_new_orders(kv, &prefix, expected_max, &place).await?;
    let mut line_count = 0i64;
    kv.scan(table::ORDER_LINE, &prefix, &mut |key_bytes, _| {
        let inside = key_bytes.starts_with(&prefix);
        line_count += inside as i64;
        inside
    })
    .await?;
    if line_count != ol_cnt_sum {
        return Err(violation(
            4,
            place,
            format!("sum(O_OL_CNT) = {ol_cnt_sum} but {line_count} ORDER-LINE rows"),
        ));
    }
    Ok(())
}

async fn check_new_orders<K: Kv>(
    kv: &K,
    prefix: &[u8],
    expected_max: i64,
    place: &str,
) -> Result<(), KvError> {
    let (mut count, mut min, mut max) = (0i64, i64::MAX, i64::MIN);
    let mut bad_key = false;
    kv.scan(table::NEW_ORDER, prefix, &mut |key_bytes, _| {
        if !key_bytes.starts_with(prefix) {
            return false;
        }
        let Ok(o) = key_part(key_bytes, 2) else {
            bad_key = true;
            return false;
        };
        count += 1;
        min = min.min(o as i64);
        max = max.max(o as i64);
        true
    })
    .await?;
    if bad_key {
        return Err(KvError::Corrupt(format!(
            "{place}: malformed NEW-ORDER key"
        )));
    }
    if count == 0 {
        return Ok(());
    }
    if max != expected_max {
        return Err(violation(
            2,
            place.to_string(),
            format!("D_NEXT_O_ID - 1 = {expected_max} but max(NO_O_ID) = {max}"),
        ));
    }
    if max - min + 1 != count {
        return Err(violation(
            3,
            place.to_string(),
            format!(
                "max - min + 1 = {} but {count} NEW-ORDER rows",
                max - min + 1
            ),
        ));
    }
    Ok(())
}
