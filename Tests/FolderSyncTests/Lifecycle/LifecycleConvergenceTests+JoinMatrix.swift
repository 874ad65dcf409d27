import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

/// Every pair of join choices converges: after a reset (the container removed or moved away,
/// then an empty folder in its place) or a stoppage (both devices disabled, and the container
/// perhaps removed meanwhile), two devices enable again one after the other, each
/// with one of the three choices; both end identical, holding what the choices promise
/// (Docs/Sync.md, "Sentinels and the lifecycle"):
///
/// - `replaceLocalWithContainer`: the device takes the container's data as it finds it;
/// - `mergeLocalIntoContainer`: the container's data and the device's, together;
/// - `replaceContainerWithLocal`: the container becomes the device's data; a device syncing on
///   it meanwhile is told of the reset and takes the new container's data.
///
/// dev1 made notes a and b, dev2 made c, both synced them; while stopped, each made one more
/// (dev1post, dev2post).
@Suite("Lifecycle convergence: every pair of join choices", .serialized)
struct JoinChoiceMatrixTests {
    enum Stoppage: String, CaseIterable, Sendable {
        /// The container removed while both are live (each told once), then back, empty.
        case containerRemoved
        /// The container moved away while both are live (each told once); an empty folder takes
        /// its place.
        case containerMoved
        /// Both devices disabled sync.
        case disabled
        /// Both devices disabled sync; then the container was removed, and came back empty.
        /// Neither saw the deletion: each finds the folder with none of its history and its
        /// identity gone.
        case removedWhileDisabled
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var stoppage: Stoppage
        var first: String
        var choices: (first: SyncJoinChoice, second: SyncJoinChoice)
        var testDescription: String {
            "\(stoppage.rawValue): \(first) \(choices.first.rawValue), then \(second) \(choices.second.rawValue)"
        }
        var second: String { first == "dev1" ? "dev2" : "dev1" }
    }

    static let choices: [SyncJoinChoice] = [
        .replaceLocalWithContainer, .mergeLocalIntoContainer, .replaceContainerWithLocal,
    ]

    static let cases: [Case] = Stoppage.allCases.flatMap { stoppage in
        ["dev1", "dev2"].flatMap { first in
            choices.flatMap { one in choices.map { two in Case(stoppage: stoppage, first: first, choices: (one, two)) }
            }
        }
    }

    /// What the choices promise: the container's data after each join, which both devices hold.
    static func expected(_ test: Case, container start: Set<String>, data: [String: Set<String>]) -> [String] {
        var container = start
        for (device, choice) in [(test.first, test.choices.first), (test.second, test.choices.second)] {
            switch choice {
            case .replaceLocalWithContainer: break
            case .mergeLocalIntoContainer: container.formUnion(data[device] ?? [])
            case .replaceContainerWithLocal: container = data[device] ?? []
            }
        }
        return container.sorted()
    }

    @Test(arguments: cases)
    func choicesConverge(_ test: Case) throws {
        let bench = LifecycleBench()
        let (dev1, dev2) = (try bench.addDevice("dev1"), try bench.addDevice("dev2"))
        #expect(try dev1.sync.enable().state == .syncing)
        #expect(try dev2.sync.enable().state == .syncing)
        try dev1.addNote("a")
        try dev1.addNote("b")
        try dev2.addNote("c")
        for device in [dev1, dev2] { #expect(device.waitForTitles(["a", "b", "c"]), "\(device.name)") }
        let start: Set<String>
        switch test.stoppage {
        case .containerRemoved:
            for _ in 0..<20 where FileManager.default.fileExists(atPath: bench.container.path) {
                try? FileManager.default.removeItem(at: bench.container)
            }
            for device in [dev1, dev2] {
                #expect(device.events.wait { _ in device.events.resets.count == 1 }, "\(device.name) was not told")
            }
            start = []
        case .containerMoved:
            try FileManager.default.moveItem(
                at: bench.container,
                to: bench.directory.url.appendingPathComponent("moved away", isDirectory: true)
            )
            for device in [dev1, dev2] {
                #expect(device.events.wait { _ in device.events.resets.count == 1 }, "\(device.name) was not told")
            }
            start = []
        case .disabled:
            try dev1.sync.disable()
            try dev2.sync.disable()
            start = ["a", "b", "c"]
        case .removedWhileDisabled:
            try dev1.sync.disable()
            try dev2.sync.disable()
            try FileManager.default.removeItem(at: bench.container)
            start = []
        }
        try dev1.addNote("dev1post")
        try dev2.addNote("dev2post")
        if test.stoppage != .disabled, !FileManager.default.fileExists(atPath: bench.container.path) {
            try FileManager.default.createDirectory(at: bench.container, withIntermediateDirectories: true)
        }
        let data = ["dev1": Set(try dev1.titles()), "dev2": Set(try dev2.titles())]
        let (first, second) = (bench[test.first], bench[test.second])
        #expect(try first.sync.enable(policy: .always(test.choices.first)).state == .syncing)
        first.sync.waitForQueuedWork()
        #expect(try second.sync.enable(policy: .always(test.choices.second)).state == .syncing)
        second.sync.waitForQueuedWork()
        if test.choices.second == .replaceContainerWithLocal {
            // The first device syncs on a container the second replaced: it is told, and takes it.
            let resets = [.disabled, .removedWhileDisabled].contains(test.stoppage) ? 1 : 2
            #expect(
                first.events.wait { _ in first.events.resets.count == resets },
                "\(first.name): \(first.events.resets)"
            )
            #expect(try first.sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        }
        let expected = Self.expected(test, container: start, data: data)
        for device in [first, second] {
            #expect(
                device.waitForTitles(expected),
                "\(device.name) holds \((try? device.titles()) ?? []), not \(expected)"
            )
        }
    }
}
