//! The five TPC-C transactions (clauses 2.4–2.8) and the mix.

use super::load::text;
use super::rows::*;
use super::{
    get_row, key, key_part, put_row, scan_prefix, table, Tpcc, TpccTask, TxnLocks,
    DISTRICTS_PER_WAREHOUSE,
};
use crate::kv::{Kv, KvBatch, KvError};
use crate::rng::{nurand, Rng64};
use crate::workload::{OpKind, TaskState};

/// Run-time constants C (clause 2.1.6; C_LAST differs from the load's by 66).
const C_LAST_RUN: u64 = 223;
const C_ID: u64 = 259;
const C_ITEM: u64 = 7911;
/// Most order lines in a New-Order.
const ORDER_LINES_MAX: usize = 15;
/// Stock-Level looks at this many recent orders.
const STOCK_LEVEL_ORDERS: u32 = 20;
/// Most customers sharing one last name in a district (bound on the scan).
const SAME_NAME_MAX: usize = 3000;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Runs one transaction drawn from the standard mix.
pub(super) async fn run_one<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    state: &mut TaskState,
) -> Result<OpKind, KvError> {
    let task = state
        .tpcc
        .as_ref()
        .ok_or_else(|| KvError::Corrupt("TPC-C task state missing".into()))?;
    let draw = state.rng.below(100);
    let rng = &mut state.rng;
    let out = &mut state.out;
    let buffer = &mut state.value;
    match draw {
        0..=44 => new_order(tpcc, kv, task, rng, out, buffer)
            .await
            .map(|()| OpKind::NewOrder),
        45..=87 => payment(tpcc, kv, task, rng, out, buffer)
            .await
            .map(|()| OpKind::Payment),
        88..=91 => order_status(tpcc, kv, task, rng, out)
            .await
            .map(|()| OpKind::OrderStatus),
        92..=95 => delivery(tpcc, kv, task, rng, out, buffer)
            .await
            .map(|()| OpKind::Delivery),
        _ => stock_level(tpcc, kv, task, rng, out)
            .await
            .map(|()| OpKind::StockLevel),
    }
}

fn other_warehouse(tpcc: &Tpcc, home: u32, rng: &mut Rng64) -> u32 {
    if tpcc.warehouses == 1 {
        return home;
    }
    let other = rng.range(1, tpcc.warehouses as u64 - 1) as u32;
    if other >= home {
        other + 1
    } else {
        other
    }
}

struct OrderLineInput {
    item: u32,
    supply_w: u32,
    quantity: i64,
    price: i64,
}

async fn new_order<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    task: &TpccTask,
    rng: &mut Rng64,
    out: &mut Vec<u8>,
    buffer: &mut Vec<u8>,
) -> Result<(), KvError> {
    let w = task.home_warehouse;
    let d = rng.range(1, DISTRICTS_PER_WAREHOUSE as u64) as u32;
    let c = nurand(rng, 1023, C_ID, 1, tpcc.scale.customers_per_district as u64) as u32;
    let ol_cnt = rng.range(5, ORDER_LINES_MAX as u64) as usize;
    let rollback = rng.percent(1);
    let mut lines = Vec::with_capacity(ol_cnt);
    for index in 0..ol_cnt {
        let mut item = nurand(rng, 8191, C_ITEM, 1, tpcc.scale.items as u64) as u32;
        if rollback && index + 1 == ol_cnt {
            item = tpcc.scale.items + 1; // unused item: the transaction rolls back
        }
        let supply_w = if rng.percent(99) {
            w
        } else {
            other_warehouse(tpcc, w, rng)
        };
        lines.push(OrderLineInput {
            item,
            supply_w,
            quantity: rng.range(1, 10) as i64,
            price: 0,
        });
    }
    // Items first: an unused item aborts before anything is written.
    for line in &mut lines {
        if !kv.get(table::ITEM, &key(&[line.item]), out).await? {
            return Ok(());
        }
        line.price = Item::decode(out)?.price;
    }
    // Rows no one else writes here (W_TAX, C_DISCOUNT): no lock.
    let warehouse: Warehouse = get_row(kv, table::WAREHOUSE, &key(&[w]), out).await?;
    let customer: Customer = get_row(kv, table::CUSTOMER, &key(&[w, d, c]), out).await?;
    // The stock rows, distinct (two lines may order one item): read once
    // unlocked, all at once, so that the locked part rarely waits for the
    // device.
    let mut stock_keys: Vec<Vec<u8>> = lines
        .iter()
        .map(|line| key(&[line.supply_w, line.item]))
        .collect();
    stock_keys.sort_unstable();
    stock_keys.dedup();
    kv.get_many(table::STOCK, &stock_keys, &mut |_, _| {})
        .await?;
    let district_key = key(&[w, d]);
    let mut locks = TxnLocks::new(tpcc);
    let rows: Vec<(u32, &[u8])> = stock_keys.iter().map(|k| (table::STOCK, &k[..])).collect();
    locks
        .take(kv, &[tpcc.district_lock_index(w, d)], &rows)
        .await;
    let mut stocks = Vec::with_capacity(stock_keys.len());
    for stock_key in &stock_keys {
        stocks.push(get_row::<_, Stock>(kv, table::STOCK, stock_key, out).await?);
    }
    let mut dist_infos = Vec::with_capacity(lines.len());
    for line in &lines {
        let at = stock_keys
            .binary_search(&key(&[line.supply_w, line.item]))
            .map_err(|_| KvError::Corrupt("stock key of an order line not read".into()))?;
        let stock = &mut stocks[at];
        stock.quantity = if stock.quantity >= line.quantity + 10 {
            stock.quantity - line.quantity
        } else {
            stock.quantity - line.quantity + 91
        };
        stock.ytd += line.quantity;
        stock.order_cnt += 1;
        stock.remote_cnt += (line.supply_w != w) as i64;
        dist_infos.push(
            stock
                .tail
                .get((d as usize - 1) * 24..d as usize * 24)
                .unwrap_or_default()
                .to_vec(),
        );
    }
    let mut batch = KvBatch::new();
    for (stock_key, stock) in stock_keys.iter().zip(&stocks) {
        put_row(&mut batch, table::STOCK, stock_key, stock, buffer);
    }
    let all_local = lines.iter().all(|line| line.supply_w == w) as i64;
    let mut district: District = get_row(kv, table::DISTRICT, &district_key, out).await?;
    let o = district.next_o_id as u32;
    district.next_o_id += 1;
    put_row(
        &mut batch,
        table::DISTRICT,
        &district_key,
        &district,
        buffer,
    );
    let _total_cents = (lines.iter().map(|l| l.price * l.quantity).sum::<i64>() as f64
        * (1.0 - customer.discount as f64 / 1e4)
        * (1.0 + (warehouse.tax + district.tax) as f64 / 1e4)) as i64;
    let order = Order {
        c_id: c as i64,
        entry_d: now_s(),
        carrier_id: 0,
        ol_cnt: ol_cnt as i64,
        all_local,
        tail: Vec::new(),
    };
    put_row(&mut batch, table::ORDER, &key(&[w, d, o]), &order, buffer);
    batch.put(table::NEW_ORDER, &key(&[w, d, o]), &[]);
    for (index, (line, dist_info)) in lines.iter().zip(dist_infos).enumerate() {
        let order_line = OrderLine {
            i_id: line.item as i64,
            supply_w_id: line.supply_w as i64,
            delivery_d: 0,
            quantity: line.quantity,
            amount: line.quantity * line.price,
            tail: dist_info,
        };
        put_row(
            &mut batch,
            table::ORDER_LINE,
            &key(&[w, d, o, index as u32 + 1]),
            &order_line,
            buffer,
        );
    }
    // Last: Order-Status finds the order through this entry, and then all of
    // the order is there.
    batch.put(table::ORDER_CUSTOMER, &key(&[w, d, c, o]), &[]);
    locks.commit(kv, &batch).await
}

/// Finds a customer by last name: the one at position ceil(n/2) in first-name order.
async fn customer_by_name<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    w: u32,
    d: u32,
    rng: &mut Rng64,
) -> Result<u32, KvError> {
    let number = nurand(rng, 255, C_LAST_RUN, 0, 999) % tpcc.scale.last_name_count();
    let mut prefix = key(&[w, d]);
    prefix.extend_from_slice(&last_name(number));
    let matches = scan_prefix(
        kv,
        table::CUSTOMER_NAME,
        &prefix,
        &prefix,
        false,
        SAME_NAME_MAX,
    )
    .await?;
    let Some((name_key, _)) = matches.get(matches.len().saturating_sub(1) / 2) else {
        return Err(KvError::Corrupt(format!(
            "no customer named {number} in district {w}/{d}"
        )));
    };
    let c_bytes = name_key.get(name_key.len() - 4..).unwrap_or_default();
    key_part(c_bytes, 0)
}

fn choose_customer_district(tpcc: &Tpcc, w: u32, d: u32, rng: &mut Rng64) -> (u32, u32) {
    if tpcc.warehouses == 1 || rng.percent(85) {
        (w, d)
    } else {
        (
            other_warehouse(tpcc, w, rng),
            rng.range(1, DISTRICTS_PER_WAREHOUSE as u64) as u32,
        )
    }
}

async fn payment<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    task: &TpccTask,
    rng: &mut Rng64,
    out: &mut Vec<u8>,
    buffer: &mut Vec<u8>,
) -> Result<(), KvError> {
    let w = task.home_warehouse;
    let d = rng.range(1, DISTRICTS_PER_WAREHOUSE as u64) as u32;
    let (c_w, c_d) = choose_customer_district(tpcc, w, d, rng);
    let by_name = rng.percent(60);
    let amount = rng.range(100, 500_000) as i64;
    let c = if by_name {
        customer_by_name(tpcc, kv, c_w, c_d, rng).await?
    } else {
        nurand(rng, 1023, C_ID, 1, tpcc.scale.customers_per_district as u64) as u32
    };
    let customer_key = key(&[c_w, c_d, c]);
    // The customer (a random row) once unlocked, so its page is in memory.
    get_row::<_, Customer>(kv, table::CUSTOMER, &customer_key, out).await?;
    // Condition 1 (W_YTD = sum(D_YTD)): both sums move under both locks.
    let mut locks = TxnLocks::new(tpcc);
    locks
        .take(
            kv,
            &[tpcc.district_lock_index(w, d), tpcc.warehouse_lock_index(w)],
            &[(table::CUSTOMER, &customer_key[..])],
        )
        .await;
    let mut batch = KvBatch::new();
    let mut customer: Customer = get_row(kv, table::CUSTOMER, &customer_key, out).await?;
    customer.balance -= amount;
    customer.ytd_payment += amount;
    customer.payment_cnt += 1;
    if customer.credit_bad == 1 {
        // C_DATA starts after 121 bytes of names/address; prepend, keep the length.
        let note = format!("{c} {c_d} {c_w} {d} {w} {amount}|");
        let data = customer.tail.get_mut(121..).unwrap_or_default();
        let keep = data.len().saturating_sub(note.len());
        data.copy_within(0..keep, data.len() - keep);
        let note_len = note.len().min(data.len());
        data[..note_len].copy_from_slice(&note.as_bytes()[..note_len]);
    }
    put_row(
        &mut batch,
        table::CUSTOMER,
        &customer_key,
        &customer,
        buffer,
    );
    let mut warehouse: Warehouse = get_row(kv, table::WAREHOUSE, &key(&[w]), out).await?;
    warehouse.ytd += amount;
    put_row(&mut batch, table::WAREHOUSE, &key(&[w]), &warehouse, buffer);
    let mut district: District = get_row(kv, table::DISTRICT, &key(&[w, d]), out).await?;
    district.ytd += amount;
    put_row(
        &mut batch,
        table::DISTRICT,
        &key(&[w, d]),
        &district,
        buffer,
    );
    let mut history = History {
        c_id: c as i64,
        c_d_id: c_d as i64,
        c_w_id: c_w as i64,
        d_id: d as i64,
        w_id: w as i64,
        date: now_s(),
        amount,
        tail: Vec::new(),
    };
    text(rng, 12, 24, &mut history.tail);
    let mut history_key = key(&[u32::MAX]);
    let sequence = tpcc.next_history_sequence();
    history_key.extend_from_slice(&sequence.to_be_bytes());
    put_row(&mut batch, table::HISTORY, &history_key, &history, buffer);
    locks.commit(kv, &batch).await
}

async fn order_status<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    task: &TpccTask,
    rng: &mut Rng64,
    out: &mut Vec<u8>,
) -> Result<(), KvError> {
    let w = task.home_warehouse;
    let d = rng.range(1, DISTRICTS_PER_WAREHOUSE as u64) as u32;
    let c = if rng.percent(60) {
        customer_by_name(tpcc, kv, w, d, rng).await?
    } else {
        nurand(rng, 1023, C_ID, 1, tpcc.scale.customers_per_district as u64) as u32
    };
    // No lock: New-Order writes the ORDER-CUSTOMER entry after the order and
    // its lines, so an order found here is complete.
    let _customer: Customer = get_row(kv, table::CUSTOMER, &key(&[w, d, c]), out).await?;
    let prefix = key(&[w, d, c]);
    let last = scan_prefix(
        kv,
        table::ORDER_CUSTOMER,
        &prefix,
        &key(&[w, d, c, u32::MAX]),
        true,
        1,
    )
    .await?;
    let Some((order_key, _)) = last.first() else {
        return Ok(());
    };
    let o = key_part(order_key, 3)?;
    let order: Order = get_row(kv, table::ORDER, &key(&[w, d, o]), out).await?;
    let line_prefix = key(&[w, d, o]);
    let lines = scan_prefix(
        kv,
        table::ORDER_LINE,
        &line_prefix,
        &line_prefix,
        false,
        ORDER_LINES_MAX,
    )
    .await?;
    if lines.len() as i64 != order.ol_cnt {
        return Err(KvError::Corrupt(format!(
            "order {w}/{d}/{o}: {} lines, O_OL_CNT {}",
            lines.len(),
            order.ol_cnt
        )));
    }
    Ok(())
}

async fn delivery<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    task: &TpccTask,
    rng: &mut Rng64,
    out: &mut Vec<u8>,
    buffer: &mut Vec<u8>,
) -> Result<(), KvError> {
    let w = task.home_warehouse;
    let carrier = rng.range(1, 10) as i64;
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        deliver_district(tpcc, kv, w, d, carrier, out, buffer).await?;
    }
    Ok(())
}

/// Delivers district `d`'s oldest undelivered order, if any, as one
/// transaction.
async fn deliver_district<K: Kv>(
    tpcc: &Tpcc,
    kv: &K,
    w: u32,
    d: u32,
    carrier: i64,
    out: &mut Vec<u8>,
    buffer: &mut Vec<u8>,
) -> Result<(), KvError> {
    let prefix = key(&[w, d]);
    // Unlocked first: the order's customer (a random row) into memory.
    if let Some((new_order_key, _)) = scan_prefix(kv, table::NEW_ORDER, &prefix, &prefix, false, 1)
        .await?
        .first()
    {
        let o = key_part(new_order_key, 2)?;
        if kv.get(table::ORDER, &key(&[w, d, o]), out).await? {
            let c = Order::decode(out)?.c_id as u32;
            kv.get(table::CUSTOMER, &key(&[w, d, c]), out).await?;
        }
    }
    let mut locks = TxnLocks::new(tpcc);
    locks.take(kv, &[tpcc.district_lock_index(w, d)], &[]).await;
    let oldest = scan_prefix(kv, table::NEW_ORDER, &prefix, &prefix, false, 1).await?;
    let Some((new_order_key, _)) = oldest.first() else {
        return Ok(());
    };
    let o = key_part(new_order_key, 2)?;
    let mut batch = KvBatch::new();
    batch.delete(table::NEW_ORDER, new_order_key);
    let order_key = key(&[w, d, o]);
    let mut order: Order = get_row(kv, table::ORDER, &order_key, out).await?;
    order.carrier_id = carrier;
    put_row(&mut batch, table::ORDER, &order_key, &order, buffer);
    let lines = scan_prefix(
        kv,
        table::ORDER_LINE,
        &order_key,
        &order_key,
        false,
        ORDER_LINES_MAX,
    )
    .await?;
    let mut amount_total = 0;
    for (line_key, value) in lines {
        let mut line = OrderLine::decode(&value)?;
        line.delivery_d = now_s();
        amount_total += line.amount;
        put_row(&mut batch, table::ORDER_LINE, &line_key, &line, buffer);
    }
    let customer_key = key(&[w, d, order.c_id as u32]);
    locks
        .take(kv, &[], &[(table::CUSTOMER, &customer_key[..])])
        .await;
    let mut customer: Customer = get_row(kv, table::CUSTOMER, &customer_key, out).await?;
    customer.balance += amount_total;
    customer.delivery_cnt += 1;
    put_row(
        &mut batch,
        table::CUSTOMER,
        &customer_key,
        &customer,
        buffer,
    );
    locks.commit(kv, &batch).await
}

async fn stock_level<K: Kv>(
    _tpcc: &Tpcc,
    kv: &K,
    task: &TpccTask,
    rng: &mut Rng64,
    out: &mut Vec<u8>,
) -> Result<(), KvError> {
    let w = task.home_warehouse;
    let d = rng.range(1, DISTRICTS_PER_WAREHOUSE as u64) as u32;
    let threshold = rng.range(10, 20) as i64;
    let district: District = get_row(kv, table::DISTRICT, &key(&[w, d]), out).await?;
    let next_o = district.next_o_id as u32;
    let first_o = next_o.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
    let prefix = key(&[w, d]);
    let lines_max = STOCK_LEVEL_ORDERS as usize * ORDER_LINES_MAX;
    let lines = scan_prefix(
        kv,
        table::ORDER_LINE,
        &prefix,
        &key(&[w, d, first_o]),
        false,
        lines_max,
    )
    .await?;
    let mut items = Vec::with_capacity(lines.len());
    for (line_key, value) in &lines {
        if key_part(line_key, 2)? >= next_o {
            break;
        }
        items.push(OrderLine::decode(value)?.i_id as u32);
    }
    items.sort_unstable();
    items.dedup();
    // The join's probes into STOCK are independent: one batch.
    let stock_keys: Vec<Vec<u8>> = items.iter().map(|&item| key(&[w, item])).collect();
    let mut _low_stock_count = 0u32;
    let mut error = None;
    kv.get_many(table::STOCK, &stock_keys, &mut |index, value| {
        let stock = match value {
            Some(bytes) => Stock::decode(bytes),
            None => Err(KvError::Corrupt(format!(
                "table {}: missing row {:?}",
                table::STOCK,
                stock_keys[index]
            ))),
        };
        match stock {
            Ok(stock) => _low_stock_count += (stock.quantity < threshold) as u32,
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    })
    .await?;
    error.map_or(Ok(()), Err)
}
