import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Container availability", .serialized)
struct ContainerAvailabilityTests {
    @Test("availability is told apart: missing, not a folder, available")
    func states() throws {
        let directory = TemporaryDirectory("availability")
        let url = directory.url.appendingPathComponent("container")
        #expect(ContainerAvailability.of(url) == .missing)
        try Data("x".utf8).write(to: url)
        #expect(ContainerAvailability.of(url) == .notAFolder)
        #expect(ContainerAvailability.of(url.appendingPathComponent("below")) == .missing)
        try FileManager.default.removeItem(at: url)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        #expect(ContainerAvailability.of(url) == .available)
    }

    @Test("a missing container is waited for; sync starts when it appears, with what was saved meanwhile")
    func missingThenCreated() throws {
        let bench = LifecycleBench()
        let container = bench.directory.url.appendingPathComponent("later", isDirectory: true)
        let device = try bench.addDevice("alpha", container: container, notes: ["before the container"])
        #expect(try device.sync.enable().state == .waitingForContainer(.missing))
        #expect(device.sync.state == .waitingForContainer(.missing))
        #expect(device.events.unavailable == [.missing])
        try device.addNote("still waiting")
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        #expect(device.events.wait { !$0.isEmpty && device.sync.state == .syncing && !device.events.joins.isEmpty })
        #expect(device.events.joins.map(\.situation) == [.newContainer])
        // The note from before sync existed joins as existing data; the one saved while waiting
        // was logged by its save.
        #expect(device.events.joins.first?.recordsExported == 1)
        #expect(try device.sync.layout.logSequences(device: "alpha").count == 2)
        // A second device on the container gets both notes.
        let other = try bench.addDevice("beta", container: container)
        try other.sync.enable()
        #expect(other.waitForTitles(["before the container", "still waiting"]))
        #expect(device.events.unavailable == [.missing])
    }

    @Test("a container reached through a symbolic link syncs like any other, both ways")
    func symbolicLinkContainer() throws {
        let bench = LifecycleBench()
        let real = bench.directory.makeDirectory("real")
        // (A shared folder linked from elsewhere: ~/Sync pointing at the engine's folder, say.)
        let link = bench.directory.url.appendingPathComponent("linked", isDirectory: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let alpha = try bench.addDevice("alpha", container: link, notes: ["through the link"])
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(try alpha.sync.layout.logSequences(device: "alpha").count == 1)
        let beta = try bench.addDevice("beta", container: real)
        try beta.sync.enable()
        #expect(beta.waitForTitles(["through the link"]))
        try beta.addNote("from the real path")
        #expect(alpha.waitForTitles(["from the real path", "through the link"]))
    }

    @Test("a container on a volume that is not mounted, then mounted read-only, then writable")
    func unmountedThenReadOnly() throws {
        let bench = LifecycleBench()
        let mountPoint = bench.directory.makeDirectory("volume")
        let container = mountPoint.appendingPathComponent("Sync", isDirectory: true)
        let device = try bench.addDevice("alpha", container: container, notes: ["kept"])
        #expect(try device.sync.enable().state == .waitingForContainer(.missing))

        // A read-only volume holding the container: prepared on a staging tmpfs, made read-only,
        // then mounted (bound) where the container is expected.
        let stage = bench.directory.makeDirectory("stage")
        guard Self.run("/bin/mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", stage.path) else {
            // Without the right to mount, read-only is checked through permissions (not as root).
            try #require(getuid() != 0, "mount(8) failed as root")
            try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
            chmod(container.path, 0o555)
            #expect(device.events.wait { _ in device.sync.state == .waitingForContainer(.readOnly) })
            chmod(container.path, 0o755)
            #expect(device.events.wait { _ in device.sync.state == .syncing })
            return
        }
        defer {
            _ = Self.run("/bin/umount", "-l", mountPoint.path)
            _ = Self.run("/bin/umount", "-l", stage.path)
        }
        try FileManager.default.createDirectory(
            at: stage.appendingPathComponent("Sync"),
            withIntermediateDirectories: true
        )
        #expect(Self.run("/bin/mount", "-o", "remount,ro", stage.path))
        #expect(Self.run("/bin/mount", "--bind", stage.path, mountPoint.path))
        #expect(device.events.wait { _ in device.sync.state == .waitingForContainer(.readOnly) })
        #expect(device.events.unavailable == [.missing, .readOnly])
        #expect(try device.sync.layout.logSequences(device: "alpha").isEmpty)
        // The volume becomes writable: sync starts by itself and exports what was kept.
        #expect(Self.run("/bin/mount", "-o", "remount,rw", stage.path))
        #expect(Self.run("/bin/mount", "-o", "remount,bind,rw", mountPoint.path))
        #expect(device.events.wait { _ in device.sync.state == .syncing })
        #expect(try device.sync.layout.logSequences(device: "alpha") == [1])
        #expect(try device.titles() == ["kept"])
    }

    @Test("pausing while waiting stops the waiting")
    func pauseWhileWaiting() throws {
        let bench = LifecycleBench()
        let container = bench.directory.url.appendingPathComponent("later", isDirectory: true)
        let device = try bench.addDevice("alpha", container: container)
        #expect(try device.sync.enable().state == .waitingForContainer(.missing))
        device.sync.pause()
        #expect(device.sync.state == .paused)
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        // Two availability intervals and a queue barrier later, it is still paused.
        device.sync.waitForQueuedWork()
        #expect(device.sync.state == .paused)
        #expect(try device.sync.resume().state == .syncing)
    }

    static func run(_ command: String, _ arguments: String...) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
