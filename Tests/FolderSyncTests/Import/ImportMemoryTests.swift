import ConcordTestSupport
import FolderSync
import Foundation
import Testing

/// An importing device's memory follows the batch it applies, not the size of the container: the
/// scan keeps each log's header only and the payloads are read again batch by batch.
@Suite(
    "Import memory",
    .serialized,
    .enabled(
        if: ProcessInfo.processInfo.environment["CONCORD_IMPORT_MEMORY"] == "1",
        "slow: `make test-memory` runs it"
    )
)
struct ImportMemoryTests {
    /// Records in the small and the large container (`CONCORD_IMPORT_RECORDS=small,large`
    /// overrides; the figures are 30,000 and 300,000).
    static var sizes: (small: Int, large: Int) {
        let parts = (ProcessInfo.processInfo.environment["CONCORD_IMPORT_RECORDS"] ?? "").split(separator: ",")
            .compactMap { Int($0) }
        return parts.count == 2 ? (parts[0], parts[1]) : (10_000, 100_000)
    }

    /// Peak resident memory of a helper process importing a container of `count` records.
    /// With `variant` (`baseline`, `scattered`), as `import-rss` describes.
    static func importPeak(records count: Int, variant: String? = nil) throws -> (before: Int, peak: Int) {
        let directory = TemporaryDirectory("import-rss")
        var imported = 0
        let arguments = ["import-rss", String(count), directory.url.path] + (variant.map { [$0] } ?? [])
        let report = try #require(
            try ChildProcess.memoryReport(arguments) { line in
                let fields = line.split(separator: " ")
                if fields.first == "imported", fields.count == 3 { imported = Int(fields[2]) ?? 0 }
            }
        )
        #expect(report.exitStatus == 0)
        #expect(imported == count + (count + 99) / 100, "every item and group imported: \(imported)")
        return (report.before, report.peak)
    }

    /// Imports a container of the small and of the large size (`variant` as `import-rss` has
    /// it) and expects the large one's peak to be at most 1.5 times the small one's.
    static func expectBoundedPeak(_ label: String, variant: String? = nil) throws {
        let (smallCount, largeCount) = sizes
        let small = try importPeak(records: smallCount, variant: variant)
        let large = try importPeak(records: largeCount, variant: variant)
        print(
            "\(label) peak RSS: \(smallCount) records \(small.peak) KiB (from \(small.before)), \(largeCount) records \(large.peak) KiB (from \(large.before))"
        )
        #expect(
            Double(large.peak) <= Double(small.peak) * 1.5,
            "\(smallCount): \(small.peak) KiB, \(largeCount): \(large.peak) KiB"
        )
    }

    @Test("importing ten times the records takes at most 1.5 times the peak memory")
    func importMemoryIsBounded() throws {
        try Self.expectBoundedPeak("import")
    }

    @Test(
        "importing ten times the records, each log naming items of most groups, takes at most 1.5 times the peak memory"
    )
    func scatteredImportMemoryIsBounded() throws {
        // Each group an import changes holds its whole set of items: the batch is bounded by
        // what its records hold, not by how many they are.
        try Self.expectBoundedPeak("scattered import", variant: "scattered")
    }

    @Test("starting from a baseline ten times the size takes at most 1.5 times the peak memory")
    func baselineMemoryIsBounded() throws {
        try Self.expectBoundedPeak("baseline start", variant: "baseline")
    }
}
