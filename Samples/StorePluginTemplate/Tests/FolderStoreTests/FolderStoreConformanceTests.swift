import FolderStore
import Persistence
import StoreConformance
import Testing

/// The plugin meets Concord's store-plugin contract: every check of `StoreConformance`, each a
/// test case of its own, so a failure names the check and what differed.
@Suite("FolderStore conformance")
struct FolderStoreConformanceTests {
    @Test("FolderStore passes the store-plugin contract", arguments: StoreConformance.checkNames)
    func conformance(_ check: String) throws {
        try StoreConformance(storeType: FolderStore.self).run(check)
    }

}
