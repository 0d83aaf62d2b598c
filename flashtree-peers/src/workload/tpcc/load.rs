//! The TPC-C loader (clause 4.3.3.1). Work is split in units: item chunks,
//! per warehouse 10 stock chunks (the first also writes WAREHOUSE) and 10
//! districts (DISTRICT, CUSTOMER, index, HISTORY, ORDER, ORDER-LINE,
//! NEW-ORDER). Unit `u` goes to part `u % parts`.

use super::rows::*;
use super::{key, table, Tpcc, DISTRICTS_PER_WAREHOUSE};
use crate::job::RunControl;
use crate::kv::{Kv, KvError};
use crate::rng::{nurand, Rng64};
use crate::workload::LoadBatch;

/// Stock chunks per warehouse.
const STOCK_CHUNKS: u32 = 10;
/// Item chunks.
const ITEM_CHUNKS: u32 = 10;
/// Run-time constant C for C_LAST at load (clause 2.1.6).
pub(super) const C_LAST_LOAD: u64 = 157;
/// Load timestamp (seconds).
const LOAD_DATE: i64 = 1_700_000_000;

/// Random alphanumeric text of `low..=high` bytes.
pub(super) fn text(rng: &mut Rng64, low: u64, high: u64, out: &mut Vec<u8>) {
    let len = rng.range(low, high);
    out.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
}

pub(super) async fn load_part<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    part: usize,
    parts: usize,
    control: &RunControl,
) -> Result<u64, KvError> {
    let units_per_warehouse = STOCK_CHUNKS + DISTRICTS_PER_WAREHOUSE;
    let unit_count = ITEM_CHUNKS + tpcc.warehouses * units_per_warehouse;
    let mut records = 0;
    for unit in (0..unit_count).filter(|u| *u as usize % parts.max(1) == part) {
        let mut rng = Rng64::new(0x7C_C000 + unit as u64);
        let kv = &mut LoadBatch::new(kv, control);
        let loaded = if unit < ITEM_CHUNKS {
            load_items(tpcc, kv, unit, &mut rng).await?
        } else {
            let rest = unit - ITEM_CHUNKS;
            let warehouse = rest / units_per_warehouse + 1;
            let sub = rest % units_per_warehouse;
            if sub < STOCK_CHUNKS {
                load_stock(tpcc, kv, warehouse, sub, &mut rng).await?
            } else {
                load_district(tpcc, kv, warehouse, sub - STOCK_CHUNKS + 1, &mut rng).await?
            }
        };
        kv.finish().await?;
        control.add_progress(loaded);
        records += loaded;
    }
    Ok(records)
}

fn chunk(count: u32, index: u32, chunks: u32) -> std::ops::Range<u32> {
    let first = (count as u64 * index as u64 / chunks as u64) as u32;
    let end = (count as u64 * (index as u64 + 1) / chunks as u64) as u32;
    first + 1..end + 1
}

async fn load_items<K: Kv>(
    tpcc: &Tpcc,
    kv: &mut LoadBatch<'_, K>,
    unit: u32,
    rng: &mut Rng64,
) -> Result<u64, KvError> {
    let mut buffer = Vec::new();
    let mut loaded = 0;
    for item in chunk(tpcc.scale.items, unit, ITEM_CHUNKS) {
        let mut row = Item {
            im_id: rng.range(1, 10_000) as i64,
            price: rng.range(100, 10_000) as i64,
            tail: Vec::new(),
        };
        text(rng, 14, 24, &mut row.tail);
        text(rng, 26, 50, &mut row.tail);
        load_row(kv, table::ITEM, &key(&[item]), &row, &mut buffer).await?;
        loaded += 1;
    }
    Ok(loaded)
}

async fn load_stock<K: Kv>(
    tpcc: &Tpcc,
    kv: &mut LoadBatch<'_, K>,
    warehouse: u32,
    sub: u32,
    rng: &mut Rng64,
) -> Result<u64, KvError> {
    let mut buffer = Vec::new();
    let mut loaded = 0;
    if sub == 0 {
        let mut row = Warehouse {
            tax: rng.range(0, 2000) as i64,
            ytd: 30_000_000,
            tail: Vec::new(),
        };
        text(rng, 81, 81, &mut row.tail);
        load_row(kv, table::WAREHOUSE, &key(&[warehouse]), &row, &mut buffer).await?;
        loaded += 1;
    }
    for item in chunk(tpcc.scale.items, sub, STOCK_CHUNKS) {
        let mut row = Stock {
            quantity: rng.range(10, 100) as i64,
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            tail: Vec::new(),
        };
        text(rng, 240, 240, &mut row.tail);
        text(rng, 26, 50, &mut row.tail);
        load_row(
            kv,
            table::STOCK,
            &key(&[warehouse, item]),
            &row,
            &mut buffer,
        )
        .await?;
        loaded += 1;
    }
    Ok(loaded)
}

async fn load_district<K: Kv>(
    tpcc: &Tpcc,
    kv: &mut LoadBatch<'_, K>,
    w: u32,
    d: u32,
    rng: &mut Rng64,
) -> Result<u64, KvError> {
    let scale = &tpcc.scale;
    let mut buffer = Vec::new();
    let mut row = District {
        tax: rng.range(0, 2000) as i64,
        ytd: 3_000_000,
        next_o_id: scale.orders_per_district as i64 + 1,
        tail: Vec::new(),
    };
    text(rng, 81, 81, &mut row.tail);
    load_row(kv, table::DISTRICT, &key(&[w, d]), &row, &mut buffer).await?;
    let mut loaded = 1;
    for c in 1..=scale.customers_per_district {
        loaded += load_customer(tpcc, kv, w, d, c, rng, &mut buffer).await?;
    }
    let mut customers: Vec<u32> = (1..=scale.customers_per_district).collect();
    for i in (1..customers.len()).rev() {
        customers.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let first_new_order = scale.orders_per_district - scale.new_orders_per_district + 1;
    for o in 1..=scale.orders_per_district {
        let delivered = o < first_new_order;
        loaded += load_order(
            tpcc,
            kv,
            [w, d, o],
            customers[o as usize - 1],
            delivered,
            rng,
            &mut buffer,
        )
        .await?;
    }
    Ok(loaded)
}

async fn load_customer<K: Kv>(
    tpcc: &Tpcc,
    kv: &mut LoadBatch<'_, K>,
    w: u32,
    d: u32,
    c: u32,
    rng: &mut Rng64,
    buffer: &mut Vec<u8>,
) -> Result<u64, KvError> {
    let name_number = if c <= 1000 {
        c as u64 - 1
    } else {
        nurand(rng, 255, C_LAST_LOAD, 0, 999) % tpcc.scale.last_name_count()
    };
    let last = last_name(name_number);
    let mut first = [b' '; 16];
    for byte in first.iter_mut().take(rng.range(8, 16) as usize) {
        *byte = b'a' + rng.below(26) as u8;
    }
    let mut row = Customer {
        balance: -1000,
        ytd_payment: 1000,
        payment_cnt: 1,
        delivery_cnt: 0,
        discount: rng.range(0, 5000) as i64,
        credit_bad: rng.percent(10) as i64,
        credit_lim: 5_000_000,
        since: LOAD_DATE,
        tail: Vec::new(),
    };
    row.tail.extend_from_slice(&last);
    row.tail.extend_from_slice(&first);
    text(rng, 89, 89, &mut row.tail);
    text(rng, 300, 500, &mut row.tail);
    load_row(kv, table::CUSTOMER, &key(&[w, d, c]), &row, buffer).await?;
    let mut name_key = key(&[w, d]);
    name_key.extend_from_slice(&last);
    name_key.extend_from_slice(&first);
    name_key.extend_from_slice(&c.to_be_bytes());
    kv.put(table::CUSTOMER_NAME, &name_key, &[]).await?;
    let mut history = History {
        c_id: c as i64,
        c_d_id: d as i64,
        c_w_id: w as i64,
        d_id: d as i64,
        w_id: w as i64,
        date: LOAD_DATE,
        amount: 1000,
        tail: Vec::new(),
    };
    text(rng, 12, 24, &mut history.tail);
    let mut history_key = key(&[w, d, u32::MAX]);
    history_key.extend_from_slice(&(c as u64).to_be_bytes());
    load_row(kv, table::HISTORY, &history_key, &history, buffer).await?;
    Ok(3)
}

#[allow(clippy::too_many_arguments)]
async fn load_order<K: Kv>(
    tpcc: &Tpcc,
    kv: &mut LoadBatch<'_, K>,
    [w, d, o]: [u32; 3],
    c: u32,
    delivered: bool,
    rng: &mut Rng64,
    buffer: &mut Vec<u8>,
) -> Result<u64, KvError> {
    let ol_cnt = rng.range(5, 15);
    let order = Order {
        c_id: c as i64,
        entry_d: LOAD_DATE,
        carrier_id: if delivered {
            rng.range(1, 10) as i64
        } else {
            0
        },
        ol_cnt: ol_cnt as i64,
        all_local: 1,
        tail: Vec::new(),
    };
    load_row(kv, table::ORDER, &key(&[w, d, o]), &order, buffer).await?;
    kv.put(table::ORDER_CUSTOMER, &key(&[w, d, c, o]), &[])
        .await?;
    for ol in 1..=ol_cnt as u32 {
        let mut line = OrderLine {
            i_id: rng.range(1, tpcc.scale.items as u64) as i64,
            supply_w_id: w as i64,
            delivery_d: if delivered { LOAD_DATE } else { 0 },
            quantity: 5,
            amount: if delivered {
                0
            } else {
                rng.range(1, 999_999) as i64
            },
            tail: Vec::new(),
        };
        text(rng, 24, 24, &mut line.tail);
        load_row(kv, table::ORDER_LINE, &key(&[w, d, o, ol]), &line, buffer).await?;
    }
    if !delivered {
        kv.put(table::NEW_ORDER, &key(&[w, d, o]), &[]).await?;
    }
    Ok(2 + ol_cnt + (!delivered) as u64)
}

/// Adds a row's put to the loader's batch.
async fn load_row<K: Kv, R: Row>(
    kv: &mut LoadBatch<'_, K>,
    table: u32,
    key: &[u8],
    row: &R,
    buffer: &mut Vec<u8>,
) -> Result<(), KvError> {
    row.encode(buffer);
    kv.put(table, key, buffer).await
}
