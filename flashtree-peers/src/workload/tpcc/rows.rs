//! Row formats: a fixed list of little-endian i64 fields, then a byte tail
//! (the text columns, sized as in the spec). Money is in cents, rates in
//! 1/10000.

use crate::kv::KvError;

/// Encoding and decoding of a row.
pub trait Row: Sized {
    /// Writes the row into `out` (cleared first).
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads a row; too short is an error.
    fn decode(bytes: &[u8]) -> Result<Self, KvError>;
}

macro_rules! row {
    ($(#[$doc:meta])* $name:ident { $($field:ident),* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq)]
        #[allow(missing_docs)]
        pub struct $name {
            $(pub $field: i64,)*
            /// Text columns.
            pub tail: Vec<u8>,
        }
        impl Row for $name {
            fn encode(&self, out: &mut Vec<u8>) {
                out.clear();
                $(out.extend_from_slice(&self.$field.to_le_bytes());)*
                out.extend_from_slice(&self.tail);
            }
            fn decode(bytes: &[u8]) -> Result<Self, KvError> {
                let fields = [$(stringify!($field)),*].len();
                if bytes.len() < fields * 8 {
                    return Err(KvError::Corrupt(format!("{} row of {} bytes", stringify!($name), bytes.len())));
                }
                let mut at = 0;
                $(
                    let $field = i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
                    at += 8;
                )*
                Ok($name { $($field,)* tail: bytes[at..].to_vec() })
            }
        }
    };
}

row!(
    /// WAREHOUSE: tail = name, street 1/2, city, state, zip (81 bytes).
    Warehouse { tax, ytd }
);
row!(
    /// DISTRICT: tail as WAREHOUSE.
    District { tax, ytd, next_o_id }
);
row!(
    /// CUSTOMER: tail = names, address, phone (121 bytes) then C_DATA (300..500).
    Customer { balance, ytd_payment, payment_cnt, delivery_cnt, discount, credit_bad, credit_lim, since }
);
row!(
    /// HISTORY: tail = H_DATA (12..24 bytes).
    History { c_id, c_d_id, c_w_id, d_id, w_id, date, amount }
);
row!(
    /// ORDER.
    Order { c_id, entry_d, carrier_id, ol_cnt, all_local }
);
row!(
    /// ORDER-LINE: tail = OL_DIST_INFO (24 bytes).
    OrderLine { i_id, supply_w_id, delivery_d, quantity, amount }
);
row!(
    /// ITEM: tail = name and data (40..74 bytes).
    Item { im_id, price }
);
row!(
    /// STOCK: tail = 10 × S_DIST (240 bytes) and S_DATA (26..50).
    Stock { quantity, ytd, order_cnt, remote_cnt }
);

/// Approximate encoded sizes (key + value), for dataset sizing.
pub const STOCK_ROW_BYTES: u64 = 8 + 32 + 278;
/// See [`STOCK_ROW_BYTES`].
pub const CUSTOMER_ROW_BYTES: u64 = 12 + 64 + 121 + 400;
/// See [`STOCK_ROW_BYTES`].
pub const HISTORY_ROW_BYTES: u64 = 20 + 56 + 18;
/// See [`STOCK_ROW_BYTES`].
pub const ORDER_ROW_BYTES: u64 = 12 + 40 + 12;
/// See [`STOCK_ROW_BYTES`].
pub const ORDER_LINE_ROW_BYTES: u64 = 16 + 40 + 24;
/// See [`STOCK_ROW_BYTES`].
pub const ITEM_ROW_BYTES: u64 = 4 + 16 + 57;

/// The 10 syllables of C_LAST (clause 4.3.2.3).
const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// C_LAST for number 0..=999, padded with zeros to 16 bytes.
pub fn last_name(number: u64) -> [u8; 16] {
    let mut name = [0u8; 16];
    let text = format!(
        "{}{}{}",
        SYLLABLES[(number / 100 % 10) as usize],
        SYLLABLES[(number / 10 % 10) as usize],
        SYLLABLES[(number % 10) as usize]
    );
    name[..text.len()].copy_from_slice(text.as_bytes());
    name
}
