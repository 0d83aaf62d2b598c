//! One stream of a trial: sequential runs at random offsets inside its own
//! region of the file (Ransom, Lim & Mitzenmacher's staggered offsets: no two streams touch the
//! same pages at the same time).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The next request of a stream, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Logical byte offset.
    pub offset_bytes: u64,
    /// Length in bytes (a multiple of the page size).
    pub len_bytes: u32,
}

/// Where a stream is in its current run.
#[derive(Debug)]
pub struct Stream {
    region_first_page: u64,
    region_pages: u64,
    run_pages: u64,
    page_bytes: u64,
    /// Requests never cross a multiple of this many pages (the I/O layer's
    /// chunk); it is also the largest request.
    request_pages_max: u64,
    next_page: u64,
    run_end_page: u64,
    rng: SmallRng,
    /// Runs started so far.
    pub runs_started: u64,
    /// Pages requested so far.
    pub pages_requested: u64,
}

impl Stream {
    /// Stream `index` of `count` over a file of `file_pages` pages; runs are
    /// `run_pages` long (clamped to the region).
    pub fn new(
        index: u32,
        count: u32,
        file_pages: u64,
        run_pages: u64,
        request_pages_max: u64,
        page_bytes: u64,
        seed: u64,
    ) -> Stream {
        debug_assert!(index < count && request_pages_max >= 1);
        // Regions are whole chunks, so a run never needs to cross into the
        // next stream's region.
        let region_chunks = (file_pages / request_pages_max / u64::from(count)).max(1);
        let region_pages = region_chunks * request_pages_max;
        let region_first_page = (u64::from(index) * region_pages).min(file_pages - region_pages);
        Stream {
            region_first_page,
            region_pages,
            run_pages: run_pages.clamp(1, region_pages),
            page_bytes,
            request_pages_max,
            next_page: 0,
            run_end_page: 0,
            rng: SmallRng::seed_from_u64(seed ^ (u64::from(index) << 32)),
            runs_started: 0,
            pages_requested: 0,
        }
    }

    /// The next request: the rest of the current run up to the next chunk
    /// boundary, or the start of a new run at a random page.
    pub fn next_request(&mut self) -> Request {
        if self.next_page == self.run_end_page {
            let slack = self.region_pages - self.run_pages;
            self.next_page = self.region_first_page + self.rng.random_range(0..=slack);
            self.run_end_page = self.next_page + self.run_pages;
            self.runs_started += 1;
        }
        let to_boundary = self.request_pages_max - self.next_page % self.request_pages_max;
        let pages = to_boundary.min(self.run_end_page - self.next_page);
        let request = Request {
            offset_bytes: self.next_page * self.page_bytes,
            len_bytes: (pages * self.page_bytes) as u32,
        };
        self.next_page += pages;
        self.pages_requested += pages;
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_stay_in_region_and_chunks() {
        let (file_pages, chunk_pages) = (64 * 1024, 64);
        for count in [1, 3, 8] {
            for run_pages in [1, 5, 64, 1000, 100_000] {
                for index in 0..count {
                    let mut stream =
                        Stream::new(index, count, file_pages, run_pages, chunk_pages, 4096, 9);
                    let region =
                        stream.region_first_page..stream.region_first_page + stream.region_pages;
                    for _ in 0..500 {
                        let request = stream.next_request();
                        let first = request.offset_bytes / 4096;
                        let pages = u64::from(request.len_bytes) / 4096;
                        assert!(pages >= 1 && pages <= chunk_pages);
                        assert!(region.contains(&first) && region.contains(&(first + pages - 1)));
                        assert_eq!(first / chunk_pages, (first + pages - 1) / chunk_pages);
                    }
                }
            }
        }
    }

    #[test]
    fn runs_have_the_asked_length() {
        let mut stream = Stream::new(0, 1, 1 << 20, 100, 64, 4096, 1);
        while stream.runs_started < 51 {
            stream.next_request();
        }
        // 50 full runs plus the first request of run 51.
        assert!(stream.pages_requested > 50 * 100 && stream.pages_requested <= 50 * 100 + 64);
        let mut sequential = Stream::new(0, 1, 1 << 20, 1, 64, 4096, 1);
        for _ in 0..10 {
            assert_eq!(sequential.next_request().len_bytes, 4096);
        }
        assert_eq!(sequential.runs_started, 10);
    }
}
