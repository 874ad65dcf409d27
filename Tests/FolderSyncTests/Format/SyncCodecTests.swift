import ConcordTestSupport
import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// The binary form of log payloads (format version 2) and of per-record clocks.
@Suite("Binary payloads and clocks")
struct SyncCodecTests {
    static func clock(_ time: UInt64, _ device: String = "dev-1") -> SyncClock {
        SyncClock(time: time, counter: UInt32(time % 7), device: device)
    }

    /// Every kind of value, edge cases included.
    static let values: [Value] = [
        .null, .string(""), .string("é\u{301} ✓ \"quoted\"\n"), .integer(0), .integer(-1), .integer(.max),
        .integer(.min),
        .double(-0.0), .double(.pi), .double(.infinity), .double(-.greatestFiniteMagnitude), .boolean(true),
        .boolean(false),
        .date(Date(timeIntervalSinceReferenceDate: 123_456.789_012_345)), .date(.distantPast), .data(Data()),
        .data(Data((0..<300).map { UInt8($0 % 256) })), .uuid(UUID()),
    ]

    static func payload(seed: UInt64) -> SyncPayload {
        var generator = SimulationRandom(seed: seed)
        var changes: [SyncChange] = []
        for index in 0..<40 {
            var change = SyncChange(id: .random(entity: index % 3 == 0 ? "Note" : "Tag"))
            if Bool.random(using: &generator) { change.created = clock(UInt64(index) * 1000) }
            if index % 11 == 0 { change.deleted = clock(UInt64(index) * 1000 + 5, "other.device_9") }
            for key in 0..<Int.random(in: 0...4, using: &generator) {
                change.values["attribute\(key)"] = ClockedValue(
                    value: values.randomElement(using: &generator)!,
                    clock: clock(UInt64(key))
                )
            }
            if Bool.random(using: &generator) {
                change.references["folder"] = ClockedReference(
                    target: Bool.random(using: &generator) ? .random(entity: "Folder") : nil,
                    clock: clock(9)
                )
            }
            if Bool.random(using: &generator) {
                change.members["tags"] = (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                    ClockedMember(
                        target: .random(entity: "Tag"),
                        present: Bool.random(using: &generator),
                        clock: clock(UInt64.max - 1)
                    )
                }
            }
            changes.append(change)
        }
        return SyncPayload(changes: changes)
    }

    static func log(_ payload: SyncPayload, version: UInt16 = LogFile.formatVersion) throws -> LogFile {
        LogFile(
            device: "dev-1",
            sequence: 1,
            schemaVersion: 1,
            created: Date(),
            payload: try payload.encoded(formatVersion: version),
            formatVersion: version
        )
    }

    @Test("payloads round-trip exactly, in both format versions", arguments: [UInt64(1), 2, 3, 4, 5])
    func payloadRoundTrip(seed: UInt64) throws {
        let payload = Self.payload(seed: seed)
        // JSON (format 1) cannot carry infinities at all; binary (format 2) carries every double.
        var finite = payload
        for index in finite.changes.indices {
            finite.changes[index].values = finite.changes[index].values.filter { _, write in
                if case .double(let number) = write.value { return number.isFinite }
                return true
            }
        }
        for (version, expected) in [(UInt16(1), finite), (2, payload)] {
            let file = try LogFile.decode(
                try Self.log(expected, version: version).encoded(),
                url: URL(fileURLWithPath: "/x")
            )
            #expect(file.formatVersion == version)
            #expect(try SyncPayload.decode(from: file) == expected)
        }
        // Binary is the smaller of the two.
        #expect(try finite.encoded(formatVersion: 2).count < finite.encoded(formatVersion: 1).count)
        // Equal payloads encode to equal bytes (dictionaries are written in key order).
        #expect(try payload.encoded() == payload.encoded())
    }

    @Test("clocks round-trip, and clocks kept as JSON by earlier versions are still read")
    func clocksRoundTrip() throws {
        var clocks = RecordClocks(created: Self.clock(1))
        clocks.deleted = Self.clock(2)
        clocks.properties = ["title": Self.clock(3), "rank": Self.clock(4, "x")]
        clocks.members = [
            "tags": [
                "Tag/1": .init(present: true, clock: Self.clock(5)),
                "Tag/2": .init(present: false, clock: Self.clock(6)),
            ]
        ]
        clocks.ghost = Record(
            id: .random(entity: "Note"),
            values: ["title": .string("ghost"), "rank": .integer(3)],
            toOne: ["folder": .random(entity: "Folder")],
            toMany: ["tags": [.random(entity: "Tag"), .random(entity: "Tag")]]
        )
        #expect(try RecordClocks.decode(clocks.encoded()) == clocks)
        #expect(try RecordClocks.decode(JSONEncoder().encode(clocks)) == clocks)
        #expect(try RecordClocks.decode(RecordClocks().encoded()) == RecordClocks())
        // A duplicate's removal, relinked references and a winner's values before a merge: each
        // alone and all together.
        var removal = RecordClocks(created: Self.clock(1))
        removal.removedAsDuplicate = .init(winner: .random(entity: "Note"), newest: Self.clock(2))
        var relinked = RecordClocks(created: Self.clock(1))
        relinked.relinked = ["folder": .random(entity: "Folder")]
        var premerge = RecordClocks(created: Self.clock(1))
        premerge.premerge = [
            "rank": .init(value: .integer(1), clock: Self.clock(3)),
            "pinned": .init(value: .boolean(false), clock: nil),
        ]
        var relationships = RecordClocks(created: Self.clock(1))
        relationships.premergeRelationships = [
            "folder": .init(target: .random(entity: "Folder"), clock: Self.clock(4)),
            "tags": .init(elements: [
                ObjectID.random(entity: "Tag").description: .init(present: true, clock: Self.clock(5)),
                ObjectID.random(entity: "Tag").description: .init(present: false, clock: nil),
            ]),
        ]
        var all = clocks
        all.removedAsDuplicate = removal.removedAsDuplicate
        all.relinked = relinked.relinked
        all.premerge = premerge.premerge
        all.premergeRelationships = relationships.premergeRelationships
        for kept in [removal, relinked, premerge, relationships, all] {
            #expect(try RecordClocks.decode(kept.encoded()) == kept)
        }
    }

    @Test("damaged binary payloads and clocks throw; they never trap or allocate what they claim")
    func damagedInputThrows() throws {
        let payload = Self.payload(seed: 7)
        let bytes = [UInt8](try payload.encoded())
        func decode(_ bytes: [UInt8]) throws -> SyncPayload {
            try SyncPayload.decode(
                from: LogFile(device: "d", sequence: 1, schemaVersion: 1, created: Date(), payload: Data(bytes))
            )
        }
        // Every truncation.
        for length in 0..<bytes.count {
            #expect(throws: (any Error).self) { try decode(Array(bytes[..<length])) }
        }
        // Trailing bytes.
        #expect(throws: (any Error).self) { try decode(bytes + [0]) }
        // Absurd counts and lengths.
        #expect(throws: (any Error).self) { try decode([SyncPayload.binaryMarker, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) }
        #expect(throws: (any Error).self) {
            try decode([SyncPayload.binaryMarker] + [UInt8](repeating: 0xFF, count: 11))
        }
        // Random flips: each either decodes to something or throws.
        var generator = SimulationRandom(seed: 99)
        for _ in 0..<2000 {
            var damaged = bytes
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                damaged[Int.random(in: 0..<damaged.count, using: &generator)] = UInt8.random(
                    in: 0...255,
                    using: &generator
                )
            }
            _ = try? decode(damaged)
        }
        let clocks = [UInt8](RecordClocks(created: Self.clock(1)).encoded())
        for length in 1..<clocks.count {
            #expect(throws: (any Error).self) { try RecordClocks.decode(Data(clocks[..<length])) }
        }
    }

    @Test("a device still reading format 1 is handed format-1 logs; a format-1 log from an older device is applied")
    func olderLogsApply() throws {
        let directory = TemporaryDirectory("codec")
        let registry = StoreRegistry()
        registry.register(SimulatedStore.self)
        let container = directory.makeDirectory("container")
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "simulated",
            at: directory("reader.json"),
            options: StoreOptions(presentsFiles: false)
        )
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "notes",
            deviceID: "reader"
        )
        defer { sync.stop() }
        var change = SyncChange(id: .random(entity: "Note"))
        change.created = Self.clock(UInt64(Date().timeIntervalSince1970 * 1000), "older")
        change.values["title"] = ClockedValue(value: .string("from an older Concord"), clock: change.created!)
        let old = LogFile(
            device: "older",
            sequence: 1,
            schemaVersion: 1,
            created: Date(),
            payload: try SyncPayload(changes: [change]).encoded(formatVersion: 1),
            formatVersion: 1
        )
        try LogWriter.write(old, layout: sync.layout)
        #expect(try sync.importAvailable().changes == 1)
        #expect(try store.records(with: [change.id]).first?["title"] == .string("from an older Concord"))
    }

    @Test(
        "A baseline of format 5 carries the devices' versions (numbers leapt over, logs met in several versions) whole, read whole or streamed; hostile versions are refused, naming the file"
    )
    func baselineVersionsRoundTrip() throws {
        let versions = [
            "alpha": LogVersions(
                digests: [2: [0, 77]],
                voids: [3...1026],
                leapt: Date(timeIntervalSince1970: 1_800_000_000)
            )
        ]
        let baseline = BaselinePayload(
            covers: ["alpha": 1027, "beta": 4],
            changes: Self.payload(seed: 3).changes,
            redirects: ["Note/\(UUID())": "Note/\(UUID())"],
            collectedThrough: Self.clock(99),
            versions: versions
        )
        func file(_ payload: Data, version: UInt16 = 5) -> LogFile {
            LogFile(
                device: "beta",
                sequence: 1031,
                schemaVersion: 1,
                created: Date(),
                payload: payload,
                formatVersion: version
            )
        }
        let decoded = try BaselinePayload.decode(from: file(try baseline.encoded(formatVersion: 5)))
        #expect(decoded.versions == versions)
        #expect(decoded.covers == baseline.covers && decoded.changes == baseline.changes)
        #expect(decoded.redirects == baseline.redirects && decoded.collectedThrough == baseline.collectedThrough)
        // Streamed, from a file.
        let directory = TemporaryDirectory("baseline-versions")
        let url = directory.url.appendingPathComponent("baseline-0000000000001031.ccbase")
        try file(try baseline.encoded(formatVersion: 5)).encoded().write(to: url)
        let streamed = try BaselineFile(url, check: { _ in nil })
        #expect(streamed.versions == versions && streamed.collectedThrough == baseline.collectedThrough)
        // Format 4 carries none.
        #expect(
            try BaselinePayload.decode(from: file(try baseline.encoded(formatVersion: 4), version: 4)).versions == nil
        )

        // More numbers leapt over than a baseline may carry, or bytes after the versions.
        var hostile = baseline
        hostile.versions = ["alpha": LogVersions(voids: (0..<65).map { UInt64($0 * 10)...UInt64($0 * 10 + 5) })]
        #expect(throws: (any Error).self) {
            try BaselinePayload.decode(from: file(try hostile.encoded(formatVersion: 5)))
        }
        try file(try hostile.encoded(formatVersion: 5)).encoded().write(to: url)
        #expect {
            _ = try BaselineFile(url, check: { _ in nil })
        } throws: { error in
            (error as? SyncError)?.code == .corruptLog && (error as? SyncError)?.url == url
        }
        let trailing = try baseline.encoded(formatVersion: 5) + Data([0])
        #expect(throws: (any Error).self) { try BaselinePayload.decode(from: file(trailing)) }
    }
}
