//! Where a file's bytes live: the striping of a [`Layout`] (CephFS's
//! file layout) and the names of data objects.
//!
//! Stripe units of `stripe_unit` bytes go round-robin over `stripe_count`
//! objects; once those objects hold `object_size` bytes each, the next set
//! of `stripe_count` objects starts. Within one object, file offsets grow
//! with object offsets, so the bytes of an object below a file size are
//! always a prefix of it (what a truncate keeps).

use cairn_proto::mds::Layout;

/// One piece of a file range inside one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectExtent {
    pub object_index: u64,
    pub object_offset_bytes: u64,
    pub length_bytes: u64,
    /// Where the piece starts within the file range asked for.
    pub range_offset_bytes: u64,
}

/// Name of data object `object_index` of inode `ino` (as CephFS names
/// them: inode and object number in hex).
#[must_use]
pub fn object_name(ino: u64, object_index: u64) -> String {
    format!("{ino:x}.{object_index:08x}")
}

fn units_per_object(layout: &Layout) -> u64 {
    u64::from(layout.object_size / layout.stripe_unit)
}

/// The object and object offset holding file byte `offset_bytes`, and how
/// many bytes from there on stay in that stripe unit.
fn locate(layout: &Layout, offset_bytes: u64) -> (u64, u64, u64) {
    let unit = u64::from(layout.stripe_unit);
    let count = u64::from(layout.stripe_count);
    let per_object = units_per_object(layout);
    let block = offset_bytes / unit;
    let within = offset_bytes % unit;
    let stripe = block / count;
    let position = block % count;
    let object_set = stripe / per_object;
    let object_index = object_set * count + position;
    let object_offset = (stripe % per_object) * unit + within;
    (object_index, object_offset, unit - within)
}

/// The object pieces of file range `[offset_bytes, offset_bytes +
/// length_bytes)`, in file order.
#[must_use]
pub fn extents(layout: &Layout, offset_bytes: u64, length_bytes: u64) -> Vec<ObjectExtent> {
    debug_assert!(layout.is_valid());
    let mut out = Vec::new();
    let mut done = 0;
    while done < length_bytes {
        let (object_index, object_offset_bytes, room) = locate(layout, offset_bytes + done);
        let length = room.min(length_bytes - done);
        match out.last_mut() {
            // Consecutive units of one object (stripe count 1) merge.
            Some(ObjectExtent {
                object_index: last_index,
                object_offset_bytes: last_offset,
                length_bytes: last_length,
                ..
            }) if *last_index == object_index
                && *last_offset + *last_length == object_offset_bytes =>
            {
                *last_length += length;
            }
            _ => out.push(ObjectExtent {
                object_index,
                object_offset_bytes,
                length_bytes: length,
                range_offset_bytes: done,
            }),
        }
        done += length;
    }
    out
}

/// How many bytes of object `object_index` lie below file size
/// `size_bytes` (a prefix of the object, see the module notes).
#[must_use]
pub fn object_bytes_below(layout: &Layout, object_index: u64, size_bytes: u64) -> u64 {
    let unit = u64::from(layout.stripe_unit);
    let count = u64::from(layout.stripe_count);
    let per_object = units_per_object(layout);
    let object_set = object_index / count;
    let position = object_index % count;
    for j in 0..per_object {
        let block = (object_set * per_object + j) * count + position;
        let start = block * unit;
        if start >= size_bytes {
            return j * unit;
        }
        if start + unit > size_bytes {
            return j * unit + (size_bytes - start);
        }
    }
    u64::from(layout.object_size)
}

/// One past the highest object index holding bytes below `size_bytes`.
#[must_use]
pub fn object_count(layout: &Layout, size_bytes: u64) -> u64 {
    if size_bytes == 0 {
        return 0;
    }
    let (last, _, _) = locate(layout, size_bytes - 1);
    // Later objects of the last object set may hold bytes too when the
    // stripe count is above one.
    let count = u64::from(layout.stripe_count);
    (last / count + 1) * count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(object_size: u32, stripe_unit: u32, stripe_count: u32) -> Layout {
        Layout {
            object_size,
            stripe_unit,
            stripe_count,
        }
    }

    #[test]
    fn default_layout_is_one_object_per_4_mib() {
        let l = Layout::default();
        let e = extents(&l, (4 << 20) - 10, 20);
        assert_eq!(e.len(), 2);
        assert_eq!(
            (
                e[0].object_index,
                e[0].object_offset_bytes,
                e[0].length_bytes
            ),
            (0, (4 << 20) - 10, 10)
        );
        assert_eq!(
            (
                e[1].object_index,
                e[1].object_offset_bytes,
                e[1].length_bytes
            ),
            (1, 0, 10)
        );
        assert_eq!(e[1].range_offset_bytes, 10);
        assert_eq!(object_count(&l, 0), 0);
        assert_eq!(object_count(&l, 1), 1);
        assert_eq!(object_count(&l, 4 << 20), 1);
        assert_eq!(object_count(&l, (4 << 20) + 1), 2);
    }

    #[test]
    fn striping_round_robins_units_over_objects() {
        // 3 objects of 16 KiB, 4 KiB units: file block b goes to object
        // b % 3 of the set, at unit (b / 3) % 4.
        let l = layout(16384, 4096, 3);
        let e = extents(&l, 0, 4096 * 13);
        let objects: Vec<u64> = e.iter().map(|x| x.object_index).collect();
        assert_eq!(objects, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3]);
        assert_eq!(e[3].object_offset_bytes, 4096);
        assert_eq!(e[12].object_offset_bytes, 0);
        // Every file byte maps to a distinct (object, offset).
        let mut seen = std::collections::BTreeSet::new();
        for x in &e {
            for i in 0..x.length_bytes / 4096 {
                assert!(seen.insert((x.object_index, x.object_offset_bytes + i * 4096)));
            }
        }
    }

    #[test]
    fn bytes_below_a_size_are_a_prefix_of_each_object() {
        let l = layout(16384, 4096, 3);
        let size = 4096 * 7 + 100;
        // Blocks 0..7 whole and 100 bytes of block 7: object 0 holds
        // blocks 0, 3, 6 (12 KiB), object 1 holds 1, 4, 7 (8 KiB + 100).
        assert_eq!(object_bytes_below(&l, 0, size), 3 * 4096);
        assert_eq!(object_bytes_below(&l, 1, size), 2 * 4096 + 100);
        assert_eq!(object_bytes_below(&l, 2, size), 2 * 4096);
        assert_eq!(object_bytes_below(&l, 3, size), 0);
        assert_eq!(object_count(&l, size), 3);
        let total: u64 = (0..object_count(&l, size))
            .map(|o| object_bytes_below(&l, o, size))
            .sum();
        assert_eq!(total, size);
    }
}
